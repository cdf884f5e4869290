package app

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/session"
)

// apply sends a decision to the member's host.
func (s *App) apply(d allocator.Decision, recvNs int64, onApplied func(error)) {
	s.send(d, recvNs, onApplied, true)
}

func (s *App) send(d allocator.Decision, recvNs int64, onApplied func(error), wake bool) {
	m := s.members[d.Key]
	if m == nil {
		if onApplied != nil {
			onApplied(allocator.ErrUnknown)
		}
		return
	}
	if err := s.checkInvariants(d); err != nil {
		// A decision that breaks an invariant never leaves the controller
		// (enforced where limits are applied, not only where decided).
		s.cnt.BadStat("invariant_violation")
		s.log.Error("decision refused: it would break an invariant", "app", s.Name, "handle", m.Handle, "err", err)
		if onApplied != nil {
			onApplied(err)
		}
		return
	}
	if s.recommend {
		s.recommended(m, d)
		if onApplied != nil {
			onApplied(ErrRecommend)
		}
		return
	}
	// The session answers s.Applied (acked), then onApplied: no closure
	// per decision on the per-period path.
	u := session.Update{Handle: m.Handle, Gen: d.Gen, QuotaUs: d.QuotaUs, MemLimit: d.MemLimit,
		Received: recvNs, Acker: s, AckKey: uint64(d.Key), OnApplied: onApplied}
	if d.QuotaUs != 0 {
		u.PeriodUs = s.periodUs
	}
	switch {
	case wake && s.deferWake:
		m.Host.Queue(u)
		s.noteWake(m.Host)
	case wake:
		m.Host.Push(u)
	default:
		m.Host.Queue(u)
	}
	s.cnt.Decision(string(d.Reason))
	if s.hub.Active() {
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: m.HostID, ContainerID: m.ContainerID,
			Handle: m.Handle, Kind: "limits", Generation: d.Gen, CPUQuotaUs: d.QuotaUs, MemoryBytes: d.MemLimit,
			Reason: string(d.Reason)})
	}
}

// Applied implements session.Acker.
func (s *App) Applied(key, gen uint64, err error) { s.acked(allocator.Key(key), gen, err) }

// acked records a daemon's answer to decision gen of member k on the
// caller's goroutine (a session's reader or sweeper; never with s.mu held:
// the one synchronous call, Queue on a closed session, passes ErrClosed,
// which is not looked at). A cut that was applied frees its share, which
// is handed out at once.
func (s *App) acked(k allocator.Key, gen uint64, err error) {
	var r allocator.AckResult
	switch {
	case err == nil:
		r = allocator.AckApplied
	case errors.Is(err, session.ErrClosed), errors.Is(err, session.ErrTimeout), errors.Is(err, session.ErrNotAcked):
		// Not known whether it was applied: both limits stay counted (a
		// dead session's members are held at the larger, LeaveHeld).
		return
	default:
		r = allocator.AckRefused
	}
	// What the freed share is handed to leaves with one write from the
	// caller (the session's reader), not through a writer's wake-up.
	s.mu.Lock()
	s.deferWake = true
	if s.a.Ack(k, gen, r) {
		s.applyAll(s.a.Redistribute())
	}
	s.unlockInline()
}

func (s *App) applyAll(ds []allocator.Decision) {
	for _, d := range ds {
		s.apply(d, 0, nil)
	}
	if s.a.LeaseFraction() > 0 || s.a.LeasedUs() > 0 {
		s.sendLeases(nil) // revocations the change queued
	}
	if s.lendsMemory() {
		s.sendMemCredits(nil)
	}
}

// checkInvariants is the last check before a decision is sent: the app's
// quotas and outstanding leases sum to at most Ω, a memory raise never
// takes the app's limits past its memory budget, and no quota is below the
// floor (lowered to Ω/λ when Ω cannot give every member the floor, as the
// allocator does). While a revoked lease has not come back (host-local
// leases) two things are legitimate and allowed, nothing else:
// a quota below the floor (a newcomer waits for the pool), and Σ quotas +
// Σ leases over a cut Ω (Σ quotas alone must still fit).
func (s *App) checkInvariants(d allocator.Decision) error {
	if d.QuotaUs == 0 && d.MemLimit == 0 {
		return nil
	}
	revoking := s.a.LeaseRevoking()
	if alloc, leased, omega := s.a.CPUAllocatedUs(), s.a.LeasedUs(), s.a.OmegaUs(); d.QuotaUs != 0 {
		if alloc > omega {
			return fmt.Errorf("sum of quotas %d µs over Ω %d µs", alloc, omega)
		}
		if alloc+leased > omega && !revoking {
			return fmt.Errorf("sum of quotas %d µs + leases %d µs over Ω %d µs", alloc, leased, omega)
		}
	}
	if d.MemLimit > 0 {
		if alloc, budget := s.a.MemAllocated(), s.a.Budget().MemoryBytes; alloc > budget {
			return fmt.Errorf("sum of memory limits %d B over the budget %d B", alloc, budget)
		} else if credit := s.a.MemCredited(); alloc+credit > budget && !s.a.MemCreditRevoking() {
			return fmt.Errorf("sum of memory limits %d B + memory credit %d B over the budget %d B", alloc, credit, budget)
		}
	}
	floor := s.a.P.CPUFloorUs
	if n := int64(s.a.Len()); n > 0 {
		floor = min(floor, s.a.OmegaUs()/n)
	}
	if d.QuotaUs > 0 && d.QuotaUs < max(floor, 1) && !revoking {
		return fmt.Errorf("quota %d µs below the floor %d µs", d.QuotaUs, floor)
	}
	return nil
}

// noteWake adds h to the hosts unlockInline wakes.
func (s *App) noteWake(h Host) {
	if !slices.Contains(s.wakeHosts, h) {
		s.wakeHosts = append(s.wakeHosts, h)
	}
}
