package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The throttle-to-raise clock (escrad_throttle_raise_seconds, the
// OnThrottleRaise hook) runs from the event a raise answers: a raise above
// the throttled quota stops it, a cut drops it, and an event after a cut
// starts a new one. The times come from the calls, so no sleep decides
// the outcome: each raise must take no longer than from the event it
// answers, and the older events lie 100 ms further back.
func TestThrottleClockRunsFromTheEventARaiseAnswers(t *testing.T) {
	var took []time.Duration
	a := &Agent{byH: map[uint32]*managed{7: {h: 7}}}
	a.cfg.OnThrottleRaise = func(h uint32, d time.Duration) {
		if h != 7 {
			t.Errorf("raise reported for handle %d", h)
		}
		took = append(took, d)
	}
	a.m = newMetrics(prometheus.NewRegistry(), a)

	// answered: an event at quota q, then a raise to r, is one report no
	// longer than from that event to the raise.
	answered := func(what string, q, r int64) {
		t.Helper()
		took = nil
		at := time.Now()
		a.noteThrottle(7, q)
		done := time.Now()
		a.noteQuota(7, r, done)
		if len(took) != 1 || took[0] > done.Sub(at) {
			t.Fatalf("%s: reports %v, want one ≤ %v", what, took, done.Sub(at))
		}
	}

	answered("raise after an event", 5000, 10000)
	// The clock stopped: a second raise answers nothing.
	a.noteQuota(7, 20000, time.Now())
	if len(took) != 1 {
		t.Fatalf("raise with no event pending reported: %v", took)
	}

	// An event answered by a cut, then a new throttle at the cut quota:
	// the raise is timed from the new event, not the first.
	first := time.Now()
	a.noteThrottle(7, 20000)
	a.noteQuota(7, 4000, first.Add(10*time.Millisecond)) // the cut
	time.Sleep(100 * time.Millisecond)
	answered("raise after a cut and a new event (not from the event before the cut)", 4000, 8000)

	// An event still pending when the quota is cut and throttled again
	// without a write in between (the cut came from elsewhere): the new
	// event's lower quota starts a new clock.
	a.noteThrottle(7, 8000)
	time.Sleep(100 * time.Millisecond)
	answered("raise after an event at a lower quota", 3000, 6000)

	// A raise that does not pass the throttled quota answers nothing, and
	// the event stays pending for the next one.
	took = nil
	a.noteThrottle(7, 6000)
	a.noteQuota(7, 6000, time.Now())
	if len(took) != 0 {
		t.Fatalf("a write of the throttled quota reported as a raise: %v", took)
	}
	a.noteQuota(7, 12000, time.Now())
	if len(took) != 1 {
		t.Fatalf("raise after a same-quota write: reports %v, want one", took)
	}
}
