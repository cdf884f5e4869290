package allocator

import "math"

// A host's share of an app (Params.HostMaxShare). Every raise (bootstrap,
// telemetry step, redistribution, pool fill, OOM grant) is bounded by
// what the raised member's host still has room for; cuts and the CPU
// floor are not (the floor is at most Ω/λ, and λ counts the host's own
// members). Eq. (2)'s fair share is the paper's; the cap is ours: with
// mutual TLS a host's identity is proven, but not the containers it
// reports, so one lying host must not empty an app its siblings serve.

func (a *Books) hostCapped() bool { return a.P.HostMaxShare > 0 && a.P.HostMaxShare < 1 }

// hostRoom is how much more CPU (µs per period) and memory the members of
// host h may be given before they hold HostMaxShare of the app.
func (a *Books) hostRoom(h HostID) (cpuUs, mem int64) {
	if !a.hostCapped() {
		return math.MaxInt64, math.MaxInt64
	}
	var q, m int64
	for k, mb := range a.members {
		if k.Host() == h {
			q += mb.QuotaUs
			m += mb.MemLimit
		}
	}
	capQ := int64(a.P.HostMaxShare * float64(a.omegaUs))
	capM := int64(a.P.HostMaxShare * float64(a.budget.MemoryBytes))
	return max(0, capQ-q), max(0, capM-m)
}

// raiseRoomUs bounds a raise of m's quota to q by its host's room.
func (a *Books) raiseRoomUs(m *Member, q int64) int64 {
	if q <= m.QuotaUs || !a.hostCapped() {
		return q
	}
	room, _ := a.hostRoom(m.Key.Host())
	return min(q, m.QuotaUs+room)
}

// memRoom is the memory m's host may still be given.
func (a *Books) memRoom(m *Member) int64 {
	_, room := a.hostRoom(m.Key.Host())
	return room
}
