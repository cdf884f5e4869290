package agent

import (
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// noteThrottle starts the clock of a throttle event; the first raise of
// the quota above the throttled one stops it (noteQuota). An event not
// answered within a second (the policy kept the quota) is forgotten, and
// so is one whose quota was cut since: an event at the lower quota is a
// new one.
func (a *Agent) noteThrottle(h uint32, quota int64) {
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil {
		return
	}
	now := time.Now()
	m.thrMu.Lock()
	if m.thrAt.IsZero() || now.Sub(m.thrAt) > time.Second || quota < m.thrQuota {
		m.thrAt, m.thrQuota = now, quota
	}
	m.thrMu.Unlock()
}

// noteQuota stops a throttle event's clock when quota raises the limit,
// and drops it when quota cuts the limit (the policy answered with a cut).
func (a *Agent) noteQuota(h uint32, quota int64, done time.Time) {
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil {
		return
	}
	m.thrMu.Lock()
	at := m.thrAt
	raised := !at.IsZero() && (quota == cgroups.Max || quota > m.thrQuota)
	cut := quota != cgroups.Max && quota < m.thrQuota
	if raised || cut || !at.IsZero() && done.Sub(at) > time.Second {
		m.thrAt = time.Time{}
	}
	m.thrMu.Unlock()
	if !raised {
		return
	}
	took := done.Sub(at)
	a.m.thrRaise.Observe(took.Seconds())
	if a.cfg.OnThrottleRaise != nil {
		a.cfg.OnThrottleRaise(h, took)
	}
}
