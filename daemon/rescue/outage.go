package rescue

import (
	"github.com/escra-dev/escra/daemon/cgroups"
)

// raiseToCeiling answers an OOM no controller can answer (no session,
// the session dropped with the request out, or the deadline passed with
// the link down; outcome outage_raised): the limit goes up to the user's own ceiling, so an
// outage never kills a container at a limit Escra reduced (Escra §IV-C
// reclaims down to usage plus a margin) that plain Docker would have
// kept. An OOM at or above the ceiling is what Docker would do too: the
// kernel acts. The raise is an ordinary limit: the next session's
// registration reports it and the controller counts it as the member's
// current limit (allocator.Join), so its books reconcile.
func (r *Rescuer) raiseToCeiling(m *Container, ev Event) (int64, bool) {
	ceil := m.Ceiling
	if ceil == 0 || ev.Limit == cgroups.Max || ceil != cgroups.Max && ceil <= ev.Limit {
		return 0, false
	}
	lim, err := r.lim.RaiseMemory(m.H, ceil)
	if err != nil {
		r.log.Warn("no controller: raising memory limit to the user's own failed", "name", m.Name, "err", err)
		return 0, false
	}
	if lim != cgroups.Max && lim <= ev.Limit {
		return 0, false
	}
	r.log.Warn("no controller: OOM answered locally, memory limit raised to the user's own", "name", m.Name,
		"from", ev.Limit, "to", lim)
	return lim, true
}
