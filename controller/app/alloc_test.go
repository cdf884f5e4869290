package app

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// reuseHost keeps updates in reused slices and acknowledges them on Wake
// (outside the app's lock, as a session's reader does).
type reuseHost struct {
	mu            sync.Mutex
	queued, spare []session.Update
	waking        bool
	quota         map[uint32]int64
}

func (h *reuseHost) Push(u session.Update) { h.Queue(u) }
func (h *reuseHost) Queue(u session.Update) {
	h.mu.Lock()
	h.queued = append(h.queued, u)
	if u.QuotaUs > 0 {
		h.quota[u.Handle] = u.QuotaUs
	}
	h.mu.Unlock()
}
func (h *reuseHost) Wake() {
	h.mu.Lock()
	if h.waking { // an ack's decisions: the outer Wake takes them
		h.mu.Unlock()
		return
	}
	h.waking = true
	defer func() { h.mu.Lock(); h.waking = false; h.mu.Unlock() }()
	for len(h.queued) > 0 {
		q := h.queued
		h.queued = h.spare[:0]
		h.mu.Unlock()
		for i := range q {
			q[i].Done(nil)
		}
		clear(q)
		h.mu.Lock()
		h.spare = q[:0]
	}
	h.mu.Unlock()
}
func (h *reuseHost) Reclaim([]uint32, uint64, func(*pb.ReclaimResult, error)) {}
func (h *reuseHost) Verdict(uint64, *pb.OomVerdict, time.Time)                {}
func (h *reuseHost) Lease(*pb.CpuLease)                                       {}

// The per-period path (a datagram's statistics decided, their updates
// queued, the acknowledgements taken) allocates nothing in steady state:
// it runs 50,000 times a second on a controller of 5,000 containers.
func TestPeriodPathAllocatesNothing(t *testing.T) {
	const n = 100
	s, c := newTestApp(t, "alloc", 0.5*n, allocator.DefaultParams())
	h := &reuseHost{quota: map[uint32]int64{}}
	for i := range n {
		if err := s.Join(MemberInfo{Key: allocator.Key(1<<32 | uint64(i+1)), Host: h, HostID: "h1", Handle: uint32(i + 1),
			ContainerID: fmt.Sprint(i), HostMaxUs: 6_400_000}); err != nil {
			t.Fatal(err)
		}
		h.Wake()
	}
	seq, decisions := uint64(0), 0
	datagram := func() {
		seq++
		for i := range n {
			q := h.quota[uint32(i+1)]
			// Usage steps every 15 periods (past the window), so quotas
			// are cut and raised from the pool.
			used := int64(2_000 + (int(seq/15)+i)%8*6_000)
			st := ingest.Stat{Handle: uint32(i + 1), Stat: allocator.Stat{Seq: seq, QuotaUs: q, PeriodUs: 100_000,
				UnusedUs: max(q-used, 0), Throttled: used >= q, UsageUs: min(used, q)}}
			before := len(h.queued)
			s.CPUStat(allocator.Key(1<<32|uint64(i+1)), st, time.Now().UnixNano())
			decisions += len(h.queued) - before
		}
		h.Wake()
	}
	for range 50 {
		datagram()
	}
	decisions = 0
	allocs := testing.AllocsPerRun(100, datagram)
	if decisions == 0 || len(c.bad) > 0 {
		t.Fatalf("%d decisions, bad %v: the test decides nothing", decisions, c.bad)
	}
	t.Logf("%v allocations per datagram of %d statistics; %d decisions in 101 datagrams", allocs, n, decisions)
	if allocs > 0 {
		t.Errorf("%v allocations per datagram of %d statistics, want 0", allocs, n)
	}
}
