package allocator

// Acknowledged accounting (no budget violations). A decision
// changes the controller's target at once, but the cgroup changes only
// when the daemon applies it, and a cut the daemon has not applied (it is
// stopped, partitioned, or refused a memory limit below usage) still holds
// the old limit. With AckGated set, the pools count for each member the
// larger of its target and every limit its daemon may have applied:
//
//	may-apply = max(last acknowledged limit, limits sent and not yet acknowledged)
//	counted   = max(target, may-apply)
//
// so runtime or memory freed by a cut is handed out only after the daemon
// acknowledged it, and Σ counted ≤ Ω bounds Σ applied. What a member
// counts beyond its target is its "extra"; CPUUnallocatedUs and
// MemUnallocated subtract Σ extra. Replay and the paper's model (daemons
// apply at once) leave AckGated off.

type pendLimit struct {
	gen        uint64
	quota, mem int64
}

// AckResult classifies a daemon's answer to a decision.
type AckResult int

const (
	// AckApplied: the daemon applied the decision (or a newer one).
	AckApplied AckResult = iota + 1
	// AckRefused: the daemon refused it (memory below usage, stale); its
	// cgroup keeps the limits it had. The CPU part may have been written
	// before the memory part failed, so it is counted as possibly applied.
	AckRefused
)

// mayQuota and mayMem are what member m's daemon may have applied.
func (m *Member) mayQuota() int64 {
	q := m.ackQuota
	for _, p := range m.pend {
		q = max(q, p.quota)
	}
	return q
}

func (m *Member) mayMem() int64 {
	v := m.ackMem
	for _, p := range m.pend {
		v = max(v, p.mem)
	}
	return v
}

// refresh recomputes m's extra and the app's totals after any change to
// its targets or acknowledged limits.
func (a *Books) refresh(m *Member) {
	if !a.AckGated {
		return
	}
	a.cpuExtra -= m.extraCPU
	a.memExtra -= m.extraMem
	m.extraCPU = max(0, m.mayQuota()-m.QuotaUs)
	m.extraMem = max(0, m.mayMem()-m.MemLimit)
	a.cpuExtra += m.extraCPU
	a.memExtra += m.extraMem
}

// record notes a decision sent to m's daemon (decide calls it).
func (a *Books) record(m *Member, d Decision) {
	if !a.AckGated {
		return
	}
	m.pend = append(m.pend, pendLimit{gen: d.Gen, quota: d.QuotaUs, mem: d.MemLimit})
	a.refresh(m)
}

// CountedCPUUs is Σ over members of max(target quota, what the daemon may
// have applied), plus leases and held shares: the bound on Σ applied.
func (a *Books) CountedCPUUs() int64 { return a.cpuAlloc + a.cpuExtra + a.leaseTotal + a.heldCPU }

// CountedMem is the same for memory limits, with the host-local memory
// credit (memcredit.go).
func (a *Books) CountedMem() int64 { return a.memAlloc + a.memExtra + a.creditTotal + a.heldMem }

// Extra is Σ (may-apply − target) over members: cuts not acknowledged yet.
func (a *Books) Extra() (cpuUs, mem int64) { return a.cpuExtra, a.memExtra }

// Ack records the daemon's answer for member k's decision gen: applied,
// it becomes the acknowledged limit; refused, the cgroup keeps the old
// one, and a refused memory cut puts the target back to it (the old limit
// stays counted, not the new). It reports whether the counted total fell,
// i.e. whether the caller should hand out what was freed (Redistribute).
func (a *Books) Ack(k Key, gen uint64, r AckResult) bool {
	m := a.members[k]
	if !a.AckGated || m == nil || gen == 0 {
		return false
	}
	before := m.extraCPU + m.extraMem
	keep := m.pend[:0]
	for _, p := range m.pend {
		if p.gen > gen {
			keep = append(keep, p)
			continue
		}
		if p.gen < gen {
			// Its own answer never came (timed out): the daemon handled
			// it before this one, applied or refused, nobody knows.
			// Coalesced older updates are answered first, one by one.
			m.ackQuota = max(m.ackQuota, p.quota)
			m.ackMem = max(m.ackMem, p.mem)
			continue
		}
		switch r {
		case AckApplied:
			if p.quota != 0 {
				m.ackQuota = p.quota
			}
			if p.mem != 0 {
				m.ackMem = p.mem
			}
		case AckRefused:
			if p.quota != 0 {
				m.ackQuota = max(m.ackQuota, p.quota)
			}
		}
	}
	m.pend = keep
	if r == AckRefused && m.MemLimit < m.ackMem && m.mayMem() == m.ackMem {
		a.memAlloc += m.ackMem - m.MemLimit
		m.MemLimit = m.ackMem
	}
	a.refresh(m)
	return m.extraCPU+m.extraMem < before
}

// Redistribute hands out what acknowledged cuts freed: members below the
// newcomers toward the share they were bootstrapped with (eq. (2)) when
// the pool has at least the floor for them, then members below the floor,
// then memory left unassigned at join.
func (a *Books) Redistribute() []Decision {
	if a.HoldRaises {
		return nil
	}
	var out []Decision
	for _, k := range a.order {
		m := a.members[k]
		if m.wantQuota <= m.QuotaUs {
			m.wantQuota = 0
			continue
		}
		q := a.raiseRoomUs(m, min(m.wantQuota, m.QuotaUs+a.CPUUnallocatedUs()))
		if q < a.floorUs(len(a.order)) {
			continue // not enough yet: wait for more acknowledgements
		}
		if q >= m.wantQuota {
			m.wantQuota = 0
		}
		if d := a.decide(m, q, 0, ReasonBootstrap); d.Gen != 0 {
			out = append(out, d)
		}
	}
	out = append(out, a.ensureFloor()...)
	return append(out, a.FillPending()...)
}
