package app

import (
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/proto/escrapb"
)

// recHost records what the app sends it: pushed (the writer woken) or
// queued (woken by the caller).
type recHost struct {
	mu             sync.Mutex
	pushed, queued []session.Update
}

func (h *recHost) Push(u session.Update)                                         { h.mu.Lock(); h.pushed = append(h.pushed, u); h.mu.Unlock() }
func (h *recHost) Queue(u session.Update)                                        { h.mu.Lock(); h.queued = append(h.queued, u); h.mu.Unlock() }
func (h *recHost) Wake()                                                         {}
func (h *recHost) Reclaim([]uint32, uint64, func(*escrapb.ReclaimResult, error)) {}
func (h *recHost) Verdict(uint64, *escrapb.OomVerdict, time.Time)                {}
func (h *recHost) Lease(*escrapb.CpuLease)                                       {}

// take returns and forgets what was sent, acknowledging each update as
// its daemon would (outside the app's lock).
func (h *recHost) take() (pushed, queued []session.Update) {
	h.mu.Lock()
	pushed, queued = h.pushed, h.queued
	h.pushed, h.queued = nil, nil
	h.mu.Unlock()
	for _, u := range append(append([]session.Update(nil), pushed...), queued...) {
		u.Done(nil)
	}
	return pushed, queued
}

// A throttle event whose member takes its equal share from a sibling on
// another host: the sibling's cut is pushed to that host at once (its
// writer is not the one the caller wakes), and the throttled member's
// raise follows the cut's acknowledgement.
func TestThrottleEventCutsSiblingOnAnotherHost(t *testing.T) {
	s, c := newTestApp(t, "thr", 1, allocator.DefaultParams())
	a, b := &recHost{}, &recHost{}
	k1, k2 := allocator.Key(1)<<32|1, allocator.Key(2)<<32|1
	for _, mi := range []MemberInfo{{Key: k1, Host: a, HostID: "a", Handle: 1, HostMaxUs: 200000},
		{Key: k2, Host: b, HostID: "b", Handle: 1, HostMaxUs: 200000}} {
		if err := s.Join(mi); err != nil {
			t.Fatal(err)
		}
	}
	a.take()
	b.take()
	// Member 1 idles down; member 2 takes the pool with throttle events.
	for seq := range uint64(30) {
		var q int64
		s.call(func() { q = s.a.Member(k1).QuotaUs })
		s.CPUStat(k1, ingest.Stat{Handle: 1, Stat: allocator.Stat{Seq: seq, QuotaUs: q, PeriodUs: 100000,
			UnusedUs: q - 1000, UsageUs: 1000}}, 0)
		a.take()
	}
	for range 3 {
		s.ThrottleEvent(k2, 30, 0)
		b.take()
	}
	var q1, q2 int64
	s.call(func() { q1, q2 = s.a.Member(k1).QuotaUs, s.a.Member(k2).QuotaUs })
	if q1 > 10000 || q1+q2 != 100000 {
		t.Fatalf("set-up: quotas %d and %d, want member 2 holding all but member 1's few ms", q1, q2)
	}

	s.ThrottleEvent(k1, 30, 0)
	bp, bq := b.take()
	if len(bp) != 1 || len(bq) != 0 || bp[0].QuotaUs != 50000 {
		t.Fatalf("host b: pushed %+v, queued %+v; want member 2's cut to 50000 pushed", bp, bq)
	}
	// The acknowledgement (take acked it) frees the share: member 1's
	// raise goes to host a.
	var got int64
	s.call(func() { got = s.a.Member(k1).QuotaUs })
	ap, aq := a.take()
	if got != 50000 || len(ap)+len(aq) != 1 {
		t.Fatalf("member 1 at %d after the cut's acknowledgement (host a: pushed %+v, queued %+v); want 50000", got, ap, aq)
	}
	if len(c.bad) != 0 {
		t.Fatalf("refused: %v", c.bad)
	}
}
