package app

import (
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// reclaimHost acks every update from another goroutine and answers a
// reclaim (§IV-C: limit → usage + δ for every handle asked) when its
// release channel is closed, or at once when release is nil; after the
// acks of the updates sent before it, as one session's answers come.
type reclaimHost struct {
	ackHost
	usage    int64
	release  chan struct{}
	answered chan time.Time
	acks     sync.WaitGroup
}

func (h *reclaimHost) Push(u session.Update) {
	h.acks.Add(1)
	go func() { u.Done(nil); h.acks.Done() }()
}
func (h *reclaimHost) Queue(u session.Update) { h.Push(u) }

func (h *reclaimHost) Reclaim(handles []uint32, margin uint64, cb func(*pb.ReclaimResult, error)) {
	go func() {
		if h.release != nil {
			<-h.release
		}
		h.acks.Wait()
		res := &pb.ReclaimResult{}
		for _, hd := range handles {
			res.Reclaimed = append(res.Reclaimed, &pb.ReclaimResult_Reclaimed{Handle: hd,
				NewLimitBytes: h.usage + int64(margin), UsageBytes: uint64(h.usage)})
		}
		h.answered <- time.Now()
		cb(res, nil)
	}()
}

// An OOM request that waits for a reclaim is granted as soon as the first
// host's answer covers its step: a host that has not answered (slow, or
// dead until its RPC times out) no longer holds the verdict for the
// reclaim's grace.
func TestReclaimFirstAnswerGrants(t *testing.T) {
	p := allocator.DefaultParams()
	p.MemCreditFraction = 0
	s, _ := newTestApp(t, "shop", 1, p)
	verdicts := make(chan *pb.OomVerdict, 4)
	fast := &reclaimHost{ackHost: ackHost{verdicts: verdicts}, usage: 10 << 20, answered: make(chan time.Time, 4)}
	slow := &reclaimHost{ackHost: ackHost{verdicts: verdicts}, usage: 10 << 20, release: make(chan struct{}),
		answered: make(chan time.Time, 4)}
	asker := &reclaimHost{ackHost: ackHost{verdicts: verdicts}, answered: make(chan time.Time, 4)}
	defer close(slow.release)
	// Three hosts; the cgroups' limits fill the 1 GiB pool (σ = 0, the
	// limits are adopted at join), two of them with slack to reclaim.
	for i, j := range []struct {
		h   Host
		mem int64
	}{{fast, 400 << 20}, {slow, 400 << 20}, {asker, 224 << 20}} {
		k := allocator.Key(uint64(i+1)<<32 | 1)
		if err := s.Join(MemberInfo{Key: k, Host: j.h, HostID: "h", Handle: 1, HostMaxUs: 100000,
			MemUsage: 10 << 20, CurMem: j.mem}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Snapshot(); st.MemUnalloc != 0 {
		t.Fatalf("pool %d B, want it empty", st.MemUnalloc)
	}
	s.OOM(allocator.Key(3<<32|1), 7, &pb.OomRequest{Handle: 1, UsageBytes: 224 << 20, LimitBytes: 224 << 20}, time.Now())
	var tFast time.Time
	select {
	case tFast = <-fast.answered:
	case <-time.After(5 * time.Second):
		t.Fatal("no reclaim answer")
	}
	select {
	case v := <-verdicts:
		if took := time.Since(tFast); !v.Granted || took >= reclaimGrace {
			t.Fatalf("verdict %v %v after the first answer; want a grant before the grace (%v)", v, took, reclaimGrace)
		}
		if want := int64(224<<20) + p.OOMStepBytes; v.NewLimitBytes != want {
			t.Fatalf("new limit %d, want %d (a whole step)", v.NewLimitBytes, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict")
	}
	select {
	case <-slow.answered:
		t.Fatal("the slow host answered before the verdict was checked")
	default:
	}
}
