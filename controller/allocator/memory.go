package allocator

// OOMAction is what the controller must do with an OOM request.
type OOMAction int

const (
	OOMGrant   OOMAction = iota + 1 // apply Decision, then send the verdict
	OOMReclaim                      // reclaim from Reclaim first, then call OOM again with mayReclaim=false
	OOMDeny
)

// OOMOutcome is the allocator's answer to an OOM request.
type OOMOutcome struct {
	Action   OOMAction
	Decision Decision // OOMGrant: the raised limit
	// OOMReclaim: members with limit > usage + δ to reclaim first; with
	// OOMGrant of less than the step: to reclaim after it (refill).
	Reclaim []Key
	Reason  string
}

// OOM handles an out-of-memory request (Escra §IV-D-2): grant a step
// from the unallocated pool; when the pool cannot cover it, grant what
// it holds if that covers the allocation (with mayReclaim, the app's
// other members are reclaimed after it, §IV-C); when it cannot cover the
// allocation either and mayReclaim, reclaim first; otherwise deny.
func (a *Books) OOM(k Key, usage, limit, want int64, mayReclaim bool) OOMOutcome {
	m := a.members[k]
	if m == nil {
		return OOMOutcome{Action: OOMDeny, Reason: "unknown container"}
	}
	if usage < 0 || limit < 0 || want < 0 || want > 1<<40 {
		return OOMOutcome{Action: OOMDeny, Reason: "absurd request"}
	}
	if usage > 0 {
		m.MemUsage = usage
	}
	if mayReclaim {
		m.OOMRequests++ // the retry after reclaim is the same request
	}
	g := a.oomGrant(m, usage, want)
	if g.deny != "" {
		m.OOMDenies++
		return OOMOutcome{Action: OOMDeny, Reason: g.deny}
	}
	base, step, grant, need := g.base, g.step, g.grant, g.need
	if grant < step && a.creditTotal > 0 {
		// Memory lent to hosts (memcredit.go) comes back for the next
		// requests; this one takes what the pool has or reclaims.
		a.queueRevokeAllCredit()
	}
	var refill []Key
	if grant < step && mayReclaim {
		if ks := a.ReclaimCandidates(k); len(ks) > 0 {
			if grant < need {
				return OOMOutcome{Action: OOMReclaim, Reclaim: ks, Reason: "pool empty: reclaiming"}
			}
			// The pool holds what the allocation needs: it goes on now,
			// and the reclaim refills the pool for the next request
			// instead of holding this one for every host's answer.
			refill = ks
		}
	}
	if grant < need {
		m.OOMDenies++
		return OOMOutcome{Action: OOMDeny, Reason: "application memory pool exhausted"}
	}
	m.OOMGrants++
	d := a.decide(m, 0, base+grant, ReasonOOMGrant)
	reason := "granted from pool"
	if grant < step {
		reason = "granted what the pool held"
	}
	return OOMOutcome{Action: OOMGrant, Decision: d, Reclaim: refill, Reason: reason}
}

// oomSize is the arithmetic of one OOM request: what the container holds
// (base), the step it should get, what the pool gives of it, and the
// least that saves the allocation; deny, when set, refuses it outright.
type oomSize struct {
	base, step, grant, need int64
	deny                    string
}

func (a *Books) oomGrant(m *Member, usage, want int64) oomSize {
	// The new limit starts from what the container holds: our limit, or
	// its usage when that is higher (unassigned member, or our view is
	// behind). Memory above our accounting must come from the pool too.
	base := max(m.MemLimit, usage)
	pool := a.MemUnallocated() - (base - m.MemLimit)
	if a.HoldRaises {
		pool = 0 // hosts that have not rejoined may hold it
	}
	step := a.Policy.OOMStep(OOMInput{P: a.P, LimitBytes: m.MemLimit, UsageBytes: usage,
		WantBytes: want, Unallocated: pool})
	need := max(want, 4096)
	room := a.memRoom(m) - (base - m.MemLimit)
	if room < need {
		// Its host holds its share of the app (hostshare.go): another
		// host's reclaim must not feed it.
		return oomSize{deny: "the host holds its share of the application (host_max_share)"}
	}
	step = min(step, room)
	grant := min(step, pool)
	if m.MaxMem > 0 && base+need > m.MaxMem {
		// The container's max_memory: Escra grants no further, as a
		// plain memory limit would not (the kernel acts at it).
		return oomSize{deny: "at the container's max_memory"}
	}
	if m.MaxMem > 0 {
		step, grant = min(step, m.MaxMem-base), min(grant, m.MaxMem-base)
	}
	return oomSize{base: base, step: step, grant: grant, need: need}
}

// OOMCovered reports whether the pool now gives member k's OOM request
// (usage, want) its whole step: deciding it later, with more reclaimed,
// could not give it more. It changes nothing.
func (a *Books) OOMCovered(k Key, usage, want int64) bool {
	m := a.members[k]
	if m == nil || usage < 0 || want < 0 || want > 1<<40 {
		return false
	}
	g := a.oomGrant(m, max(usage, 0), want)
	return g.deny == "" && g.grant >= g.step
}

// ReclaimCandidates are the members other than except whose limit exceeds
// usage + δ (§IV-C), by the last usage the controller saw.
func (a *Books) ReclaimCandidates(except Key) []Key {
	var out []Key
	for _, k := range a.order {
		m := a.members[k]
		if k != except && m.MemLimit > 0 && m.MemLimit > m.MemUsage+a.P.SafeMarginBytes {
			out = append(out, k)
		}
	}
	return out
}

// Reclaimed records what a daemon did for one member: the limit went to
// newLimit; the difference returns to the pool. A result that would set a
// limit below usage is refused (returns false) and changes nothing.
func (a *Books) Reclaimed(k Key, newLimit, usage int64) bool {
	m := a.members[k]
	if m == nil || newLimit <= 0 || usage < 0 || newLimit < usage || m.MemLimit == 0 {
		return false
	}
	m.MemUsage = usage
	if a.AckGated {
		m.ackMem = newLimit // the daemon wrote it and said so
		a.refresh(m)
	}
	if newLimit >= m.MemLimit {
		return false
	}
	a.memAlloc -= m.MemLimit - newLimit
	m.MemLimit = newLimit
	a.refresh(m)
	return true
}

// PlanReclaim computes, from known usage, the limits reclaim would set:
// limit → usage + δ where limit > usage + δ. Replay applies it directly.
func (a *Books) PlanReclaim(except Key) []Decision {
	var out []Decision
	for _, k := range a.ReclaimCandidates(except) {
		m := a.members[k]
		out = append(out, Decision{Key: k, MemLimit: m.MemUsage + a.P.SafeMarginBytes})
	}
	return out
}

// Usage records a usage sample.
func (a *Books) Usage(k Key, usage int64) {
	if m := a.members[k]; m != nil && usage >= 0 {
		m.MemUsage = usage
	}
}

// FillPending assigns memory to members left unassigned at join, once
// the pool has room again (eq. (2) share or what is left).
func (a *Books) FillPending() []Decision {
	if a.HoldRaises {
		return nil
	}
	var out []Decision
	lambda := max(len(a.order), 1)
	fair := int64((1 - a.budget.Sigma) * float64(a.budget.MemoryBytes) / float64(lambda))
	for _, k := range a.order {
		m := a.members[k]
		if m.MemLimit != 0 {
			continue
		}
		room := a.memRoom(m)
		mem := min(fair, a.MemUnallocated(), room)
		if m.MaxMem > 0 {
			mem = min(mem, m.MaxMem)
		}
		if mem < max(4*MiB, m.MemUsage+a.P.SafeMarginBytes) {
			if room < min(fair, a.MemUnallocated()) {
				continue // its host holds its share; another host's member may fit
			}
			break
		}
		if d := a.decide(m, 0, mem, ReasonPoolFilled); d.Gen != 0 {
			out = append(out, d)
		}
	}
	return out
}
