package allocator

// Recommend mode (docs/spec.md, mode: recommend): the books decide as
// ever, but nothing is sent, so each member's target is what Escra would
// set and its cgroup keeps the limits it had (Member.Applied). The books
// run as in the paper's model, decisions taking effect at once (AckGated
// off); the daemon's statistics, measured under the container's own
// limits, are first restated against the recommended quota (ShadowStat),
// and a usage sample above the recommended memory limit stands for the
// OOM request that limit would have raised (ShadowUsage).

// ReasonEnforce: the switch from recommend to enforce sends each member
// the limits recommended for it.
const ReasonEnforce Reason = "enforce"

// Applied is what the member's cgroup holds as far as the books know:
// the limits it registered with, or the last ones its daemon
// acknowledged (0: unknown or unlimited memory).
func (m *Member) Applied() (quotaUs, mem int64) { return m.ackQuota, m.ackMem }

// Recommend switches the books to recommend mode. What the daemons may
// have applied becomes the applied limits, which no decision changes
// from here.
func (a *Books) Recommend() {
	if a.AckGated {
		for _, m := range a.members {
			m.ackQuota, m.ackMem = m.mayQuota(), m.mayMem()
		}
	}
	a.AckGated = false
	for _, m := range a.members {
		m.pend, m.extraCPU, m.extraMem, m.wantQuota = nil, 0, 0, 0
	}
	a.cpuExtra, a.memExtra = 0, 0
}

// Enforce switches recommend-mode books to enforcing: the applied limits
// are counted until replaced (acknowledged accounting, applied.go), and
// every member whose recommendation differs from them gets a decision
// carrying it. Σ targets ≤ Ω holds already; the pools hand out what the
// cuts free once their daemons acknowledge them.
func (a *Books) Enforce() []Decision {
	a.AckGated = true
	var out []Decision
	for _, k := range a.order {
		m := a.members[k]
		if a.HoldRaises {
			// Nothing is raised while hosts may still hold what the pools
			// seem to have: a recommendation above what the cgroup holds
			// waits (Redistribute hands it out after the hold).
			if m.ackQuota > 0 && m.QuotaUs > m.ackQuota {
				a.cpuAlloc -= m.QuotaUs - m.ackQuota
				m.wantQuota, m.QuotaUs = m.QuotaUs, m.ackQuota
			}
			if m.ackMem > 0 && m.MemLimit > m.ackMem {
				a.memAlloc -= m.MemLimit - m.ackMem
				m.MemLimit = m.ackMem
			}
		}
		a.refresh(m)
		d := Decision{Key: k, Reason: ReasonEnforce}
		if m.QuotaUs > 0 && m.QuotaUs != m.ackQuota {
			d.QuotaUs = m.QuotaUs
		}
		if m.MemLimit > 0 && m.MemLimit != m.ackMem {
			d.MemLimit = m.MemLimit
		}
		if d.QuotaUs == 0 && d.MemLimit == 0 {
			continue
		}
		m.Gen++
		d.Gen = m.Gen
		a.record(m, d)
		out = append(out, d)
	}
	return out
}

// ShadowStat restates period s of member k, measured under the
// container's own quota, against the quota recommended for it: the
// runtime left unused under that quota, and throttled when the container
// used all of it (or was throttled under a quota at least as large). A
// container held below its recommendation by its own limit shows no more
// demand than that limit lets it use.
func (a *Books) ShadowStat(k Key, s Stat) Stat {
	m := a.members[k]
	if m == nil || m.QuotaUs <= 0 || s.PeriodUs <= 0 {
		return s
	}
	pUs := a.P.PeriodUs()
	used := s.UsageUs * pUs / s.PeriodUs
	own := s.QuotaUs // -1: unlimited, never below the recommendation
	if own > 0 {
		own = own * pUs / s.PeriodUs
	}
	rec := m.QuotaUs
	out := s
	out.Throttled = used >= rec || (s.Throttled && (own < 0 || own >= rec))
	out.QuotaUs = rec * s.PeriodUs / pUs
	out.UnusedUs = max(0, rec-used) * s.PeriodUs / pUs
	return out
}

// ShadowUsage records a usage sample of a recommend-mode member. Usage
// above its recommended memory limit is what would have raised an OOM
// request at that limit (Escra §IV-D-2): the books decide it as the
// controller would, reclaiming the other members' recommendations down to
// usage + δ first when the pool falls short (§IV-C), and return the raised
// recommendation. The OOM counters stay for the requests that happened.
func (a *Books) ShadowUsage(k Key, usage int64) (Decision, bool) {
	m := a.members[k]
	if m == nil || usage < 0 {
		return Decision{}, false
	}
	m.MemUsage = usage
	if m.MemLimit == 0 || usage <= m.MemLimit {
		return Decision{}, false
	}
	grants, denies := m.OOMGrants, m.OOMDenies
	defer func() { m.OOMGrants, m.OOMDenies = grants, denies }()
	// The request is for the page that failed: OOM starts the new limit
	// from usage and takes the gap above the limit from the pool too.
	o := a.OOM(k, usage, m.MemLimit, 4096, false)
	if o.Action != OOMGrant && a.ShadowReclaim(k) > 0 {
		o = a.OOM(k, usage, m.MemLimit, 4096, false)
	}
	return o.Decision, o.Action == OOMGrant
}

// ShadowReclaim lowers the recommended memory limits of the members
// (but except, when given) to usage + δ where they are above it (the
// §IV-C reclaim, done on the books alone), and reports how many it
// lowered.
func (a *Books) ShadowReclaim(except ...Key) int {
	n := 0
	for _, k := range a.order {
		m := a.members[k]
		if len(except) > 0 && k == except[0] || m.MemLimit == 0 || m.MemLimit <= m.MemUsage+a.P.SafeMarginBytes {
			continue
		}
		if a.Reclaimed(k, m.MemUsage+a.P.SafeMarginBytes, m.MemUsage) {
			n++
		}
	}
	return n
}

// SetMax changes member k's caps (0: none) and cuts what is above them.
// A memory cut below usage is refused by the daemon, which keeps the old
// limit (applied.go), as for any cut.
func (a *Books) SetMax(k Key, maxQuotaUs, maxMem int64) []Decision {
	m := a.members[k]
	if m == nil {
		return nil
	}
	m.MaxQuotaUs, m.MaxMem = max(maxQuotaUs, 0), max(maxMem, 0)
	a.capsGen++
	m.HostMaxUs = m.hostUs
	if m.MaxQuotaUs > 0 {
		m.HostMaxUs = min(m.HostMaxUs, m.MaxQuotaUs)
	}
	var q, mem int64
	if m.QuotaUs > m.HostMaxUs {
		q = m.HostMaxUs
	}
	if m.MaxMem > 0 && m.MemLimit > m.MaxMem {
		mem = m.MaxMem
	}
	if d := a.decide(m, q, mem, ReasonRebalance); d.Gen != 0 {
		return []Decision{d}
	}
	return nil
}
