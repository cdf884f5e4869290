package allocator

// The partition hold. A Distributed Container caps the aggregate of its
// containers' limits across servers (Escra §III, §IV-A: "capping the
// overall aggregate resource usage for a given application"); the
// controller can keep that cap only over limits it knows. When a host's
// session ends (a partition, a stopped or dead escrad) the host goes
// silent, and what its containers' cgroups hold is no longer known:
//
//   - the controller's last limits, or any decision sent and not
//     acknowledged (applied.go's may-apply);
//   - memory raised up to the container's own limit: escrad answers an OOM
//     no controller answers by raising the limit to the user's own
//     (daemon/rescue/outage.go);
//   - quota raised from host-local lease credit nobody heard of (the
//     host's lease, held by the app apart);
//   - the container's own limits: escrad puts them back once no controller
//     was reachable for its --restore-after (daemon/agent/restore.go), and
//     may fail to for memory while usage is above them (it retries).
//
// So a silent member is held at
//
//	cpu = max(may-apply quota, own quota)
//	mem = max(may-apply mem,   own memory)
//
// and, when its own limits are none (unlimited) or unknown (an older
// daemon), at max(may-apply, may-apply + pool) for what is unbounded: all
// the pool has left, since nothing bounds what it may take. When the own
// quota is more than the pool has, members above the floor are cut to
// make room (the hold's room must be applied before the host's
// --restore-after can pass: cuts land in milliseconds, the put-back comes
// seconds later); memory is never cut by force, so a hold larger than the
// pool leaves the app's memory counted over its budget and nothing is
// granted until reclaim has brought the live members down.
//
// Neither timer nor restore makes the held amount smaller in a way the
// controller could prove (an escrad that died keeps its last limits; a
// restore puts own limits back, which the hold covers; a memory put-back
// below usage is refused), so the hold stays until the container rejoins
// and its daemon reports the limits the cgroup holds (Join counts them),
// or its host rejoins without it, or the controller presumes the host lost
// (server Config.DeadHold). Σ live limits + Σ held ≤ Ω then holds through
// the partition and the rejoin: a container that rejoins with its own
// limits back re-enters with what was held for it.

type held struct{ cpuUs, mem int64 }

// holdOf is what member m's cgroup may hold once its host is silent.
func (a *Books) holdOf(m *Member) (cpuUs, mem int64) {
	mayQ, mayM := m.QuotaUs+m.extraCPU, m.MemLimit+m.extraMem
	if m.ownQuota > 0 {
		cpuUs = max(mayQ, min(m.ownQuota, m.hostUs))
	} else { // none or unknown: as much as the host and the pool allow
		cpuUs = max(mayQ, min(m.hostUs, mayQ+a.CPUUnallocatedUs()))
	}
	if m.ownMem > 0 {
		mem = max(mayM, m.ownMem)
	} else {
		mem = mayM + a.MemUnallocated()
	}
	return cpuUs, mem
}

// LeaveHeld removes member k like Leave but holds what its cgroup may
// hold (holdOf) out of the pools under id until Unhold(id): its host is
// out of reach, and handing that to others would put Σ applied limits
// over the budget. Members above the floor are cut when the held quota
// needs more than the pool has.
func (a *Books) LeaveHeld(k Key, id string) ([]Decision, error) {
	m, ok := a.members[k]
	if !ok {
		return nil, ErrUnknown
	}
	cpu, mem := a.holdOf(m)
	a.HoldShare(id, cpu, mem)
	out, err := a.Leave(k)
	if short := a.cpuAlloc + a.leaseTotal + a.heldCPU - a.omegaUs; short > 0 {
		if a.leaseTotal > 0 {
			a.queueRevokeAll()
		}
		out = append(out, a.takeCPU(short, a.floorUs(len(a.order)))...)
	}
	return out, err
}

// HoldShare keeps cpuUs and mem out of the pools under id until Unhold
// (a silent host's lease, which its daemon may have used).
func (a *Books) HoldShare(id string, cpuUs, mem int64) {
	if cpuUs <= 0 && mem <= 0 {
		return
	}
	h := a.held[id]
	h.cpuUs += cpuUs
	h.mem += mem
	a.held[id] = h
	a.heldCPU += cpuUs
	a.heldMem += mem
}

// Unhold gives a held share back to the pools; false when none is held.
func (a *Books) Unhold(id string) bool {
	h, ok := a.held[id]
	if !ok {
		return false
	}
	delete(a.held, id)
	a.heldCPU -= h.cpuUs
	a.heldMem -= h.mem
	return true
}

// Held is Σ held CPU (µs per period) and memory.
func (a *Books) Held() (cpuUs, mem int64) { return a.heldCPU, a.heldMem }
