package app

import (
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/ingest"
)

// CPUStat decides one period's statistic (§IV-D-1) on the caller's
// goroutine (the UDP reader). The update is queued on the member's host
// without waking its writer: the caller wakes it once per datagram, so
// all updates a datagram causes travel in one SetLimits envelope.
func (s *App) CPUStat(k allocator.Key, st ingest.Stat, recvNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recommend {
		st.Stat = s.a.ShadowStat(k, st.Stat)
	}
	d, err := s.a.CPU(k, st.Stat)
	switch err {
	case nil:
	case allocator.ErrStale:
		s.cnt.BadStat("stale")
		return
	case allocator.ErrAbsurd:
		s.cnt.BadStat("absurd")
		return
	default:
		s.cnt.BadStat("unknown_container")
		return
	}
	if d.Gen != 0 {
		s.send(d, recvNs, nil, false)
	}
}

// Throttle event results (metric labels).
const (
	ThrottleRaised   = "raised"
	ThrottleNoChange = "nochange"
	ThrottleStale    = "stale"
	ThrottleTook     = "took"
)

// ThrottleEvent hands a throttle event (member k ran out of quota in the
// middle of period seq) to the policy on the caller's goroutine, like
// CPUStat: a raise is queued on the host exactly as a period decision,
// and the caller wakes the writer.
func (s *App) ThrottleEvent(k allocator.Key, seq uint64, recvNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recommend {
		// Measured under the container's own quota, not the
		// recommendation: the period's restated statistic decides.
		return
	}
	ds, err := s.a.Throttle(k, seq)
	switch err {
	case nil:
	case allocator.ErrStale:
		// The period's record came first (reordered datagrams): the
		// period decision has already seen the throttle.
		s.cnt.ThrottleEvent(ThrottleStale)
		return
	default:
		s.cnt.BadStat("unknown_container")
		return
	}
	raised := false
	for _, d := range ds {
		raised = raised || d.Key == k
		// The caller wakes the event's host; a sibling cut on another
		// host wakes that host's writer itself.
		other := d.Key != k && s.members[d.Key] != nil && s.members[k] != nil &&
			s.members[d.Key].HostID != s.members[k].HostID
		s.send(d, recvNs, nil, other)
	}
	switch {
	case raised:
		s.cnt.ThrottleEvent(ThrottleRaised)
	case len(ds) > 0:
		// Members above their share were cut; k's raise follows the
		// acknowledgements (Redistribute).
		s.cnt.ThrottleEvent(ThrottleTook)
	default:
		s.cnt.ThrottleEvent(ThrottleNoChange)
	}
}
