package allocator

import "errors"

// Host-local memory credit: the memory counterpart of the CPU leases
// (lease.go). Escra §IV-B and §IV-D-2 have every OOM request travel to
// the controller while the allocation that hit the limit waits; here the
// controller lends each host a slice of the app's unassigned memory, and
// the host's daemon answers an OOM from it with no round trip, reporting
// every use. A credit counts as assigned from the moment it is granted
// until it is used (it becomes the member's limit) or returned, so
//
//	Σ memory limits + Σ_hosts credit_h ≤ M (the app's memory budget)
//
// holds on the controller at all times (CountedMem includes the credit),
// and what a daemon may apply never exceeds it: it raises a limit by at
// most its credit. Uses and returns travel on the same ordered TCP
// session, so a return accounts for every use made before it.
//
// Shrinking is revoke-then-regrant, as for leases: a revoked credit still
// counts until the daemon's return arrives. A join the pool cannot give
// its share, or an OOM request the pool cannot cover, revokes every
// credit of the app; the returns refill the pool (FillPending and the
// next OOM request take it).

// ReasonMemCredit: a daemon raised the memory limit from its credit.
const ReasonMemCredit Reason = "mem-credit"

type memCredit struct {
	id       uint64
	bytes    int64
	revoking bool
	sig      uint64 // members list last sent (memberSig)
	sigGen   uint64 // Books.capsGen when sig was last checked
	sent     bool
}

// MemCap is a member a host's credit may serve, with its max_memory.
type MemCap struct {
	Handle   uint32
	MaxBytes int64
}

// MemCreditCmd is what the controller tells one host about its credit.
type MemCreditCmd struct {
	Host HostID
	ID   uint64
	// AddBytes grows the credit (a grant); 0 with Revoke set asks it back.
	AddBytes  int64
	Revoke    bool
	StepBytes int64
	// With MembersSet, Members replaces the handles the credit serves.
	MembersSet bool
	Members    []MemCap
}

var (
	ErrNoCredit    = errors.New("allocator: no such memory credit")
	ErrCreditOver  = errors.New("allocator: memory credit use beyond the credit")
	ErrCreditOwner = errors.New("allocator: memory credit used for a member of another host")
)

// MemCreditFraction is the share of the unassigned memory this app lends
// (0: none; also under a policy that does not react inside a period, so
// escra-paper keeps the Escra paper's rule: every OOM asks the controller).
func (a *Books) MemCreditFraction() float64 {
	if p, ok := a.Policy.(inPeriodPolicy); ok && p.ReactsInPeriod() {
		return a.P.MemCreditFraction
	}
	return 0
}

// MemCredit is host h's outstanding memory credit (0: none).
func (a *Books) MemCredit(h HostID) int64 {
	if c := a.credits[h]; c != nil {
		return c.bytes
	}
	return 0
}

// MemCredited is Σ outstanding memory credit.
func (a *Books) MemCredited() int64 { return a.creditTotal }

// MemCreditRevoking reports whether a revoked credit has not come back.
func (a *Books) MemCreditRevoking() bool {
	for _, c := range a.credits {
		if c.revoking {
			return true
		}
	}
	return false
}

// RebalanceMemCredit sets each host with members toward a credit of
// frac × (M − Σ counted limits) × (its members / λ), within the host's
// share (host_max_share): a raise is granted at once from the pool; a
// credit more than twice its target (plus one OOM step) is revoked and
// granted again after the return. A host whose members or their caps
// changed gets the new list. It returns the commands to send.
func (a *Books) RebalanceMemCredit(frac float64) []MemCreditCmd {
	if frac <= 0 || len(a.order) == 0 {
		return a.revokeAllCredit()
	}
	if a.HoldRaises {
		return nil
	}
	var out []MemCreditCmd
	for h, c := range a.credits { // hosts without members give theirs back
		if c.revoking || a.hasMembers(h) {
			continue
		}
		if c.bytes == 0 {
			delete(a.credits, h)
		} else {
			c.revoking = true
			out = append(out, MemCreditCmd{Host: h, ID: c.id, Revoke: true})
		}
	}
	free := a.budget.MemoryBytes - (a.memAlloc + a.memExtra + a.heldMem)
	step := a.P.OOMStepBytes
	for i := 0; i < len(a.order); {
		h, end := a.nextRun(i)
		keys := a.order[i:end]
		i = end
		target := int64(frac * float64(free) * float64(len(keys)) / float64(len(a.order)))
		if _, room := a.hostRoom(h); room < target {
			target = max(0, room)
		}
		target &^= 4095 // whole pages, as every limit the daemon writes
		c := a.credits[h]
		if c == nil {
			c = &memCredit{}
			a.credits[h] = c
		}
		cmd := MemCreditCmd{Host: h, ID: c.id, StepBytes: step}
		switch {
		case c.revoking:
			continue
		case c.bytes > 2*target+step:
			c.revoking, c.sent = true, false
			out = append(out, MemCreditCmd{Host: h, ID: c.id, Revoke: true})
			continue
		case target > c.bytes && target-c.bytes >= min(step, target/2):
			add := min(target-c.bytes, a.MemUnallocated()) &^ 4095
			if add <= 0 {
				break
			}
			if c.bytes == 0 {
				a.creditSeq++
				c.id, c.sent = a.creditSeq, false // a new id starts a new list
				cmd.ID = c.id
			}
			c.bytes += add
			a.creditTotal += add
			cmd.AddBytes = add
		}
		if c.id == 0 || (c.bytes == 0 && cmd.AddBytes == 0) {
			continue // nothing lent: the list goes with the first grant
		}
		if !c.sent || c.sigGen != a.capsGen {
			c.sigGen = a.capsGen
			if sig := a.memberSig(keys); !c.sent || c.sig != sig {
				// The list is made only when it goes out (members or caps changed).
				caps := make([]MemCap, len(keys))
				for j, k := range keys {
					caps[j] = MemCap{Handle: uint32(k), MaxBytes: a.members[k].MaxMem}
				}
				cmd.MembersSet, cmd.Members = true, caps
				c.sig, c.sent = sig, true
			}
		}
		if cmd.AddBytes > 0 || cmd.MembersSet {
			out = append(out, cmd)
		}
	}
	return out
}

// memberSig is an FNV-1a hash of a host's members (keys) and their caps.
func (a *Books) memberSig(keys []Key) uint64 {
	h := uint64(14695981039346656037)
	for _, k := range keys {
		for _, v := range [2]uint64{uint64(uint32(k)), uint64(a.members[k].MaxMem)} {
			for i := 0; i < 8; i++ {
				h ^= (v >> (8 * i)) & 0xff
				h *= 1099511628211
			}
		}
	}
	return h
}

func (a *Books) revokeAllCredit() []MemCreditCmd {
	var out []MemCreditCmd
	for _, h := range sortedHosts(a.credits) {
		if c := a.credits[h]; c.bytes > 0 && !c.revoking {
			c.revoking = true
			c.sent = false
			out = append(out, MemCreditCmd{Host: h, ID: c.id, Revoke: true})
		}
	}
	return out
}

// queueRevokeAllCredit asks every credit back (a join or an OOM request
// needs the pool); TakeMemCreditCmds hands the revocations out.
func (a *Books) queueRevokeAllCredit() {
	a.pendingCredit = append(a.pendingCredit, a.revokeAllCredit()...)
}

// TakeMemCreditCmds returns (and forgets) the revocations that joins and
// OOM requests queued.
func (a *Books) TakeMemCreditCmds() []MemCreditCmd {
	out := a.pendingCredit
	a.pendingCredit = nil
	return out
}

// MemCreditUse records that host h's daemon raised member k's memory
// limit by bytes from credit id, writing limit. The credit shrinks and the
// member's limit grows by the same amount, so Σ limits + Σ credit does not
// rise: the new target is the limit the daemon wrote, kept between the
// controller's limit + bytes and what the member counted (its limit plus
// any cut not acknowledged, which the daemon may have raised from) +
// bytes. When that is the limit the daemon wrote, no decision is
// returned. A use beyond the credit (a daemon bug or a forged message),
// or a limit outside those bounds, is clamped and the returned decision
// carries the limit the controller counts, so both views meet again.
func (a *Books) MemCreditUse(h HostID, id uint64, k Key, bytes, limit int64) (Decision, error) {
	c := a.credits[h]
	m := a.members[k]
	switch {
	case c == nil || c.id != id || bytes <= 0:
		if m != nil && k.Host() == h {
			return a.reassertMem(m), ErrNoCredit
		}
		return Decision{}, ErrNoCredit
	case m == nil:
		return Decision{}, ErrUnknown
	case k.Host() != h:
		return Decision{}, ErrCreditOwner
	}
	var err error
	if bytes > c.bytes {
		bytes, err = c.bytes, ErrCreditOver
	}
	c.bytes -= bytes
	a.creditTotal -= bytes
	m.OOMRequests++
	m.OOMGrants++
	lo := m.MemLimit&^4095 + bytes // the daemon raised from the kernel's whole pages
	hi := m.MemLimit + m.extraMem + bytes
	target := min(max(limit, lo), hi)
	if m.MaxMem > 0 {
		target = min(target, max(m.MaxMem, m.MemLimit))
	}
	if target == limit {
		// The daemon holds what is now counted: nothing to send. An echo
		// would race the daemon's next local raise and could lower the
		// limit under the tasks it just rescued.
		a.memAlloc += target - m.MemLimit
		m.MemLimit = target
		if a.AckGated {
			m.ackMem = target // the daemon wrote it and said so
		}
		a.refresh(m)
		return Decision{}, err
	}
	d := a.decide(m, 0, target, ReasonMemCredit)
	if d.Gen == 0 {
		d = a.reassertMem(m)
	}
	return d, err
}

// reassertMem repeats m's counted memory limit under a new generation.
func (a *Books) reassertMem(m *Member) Decision {
	if m.MemLimit <= 0 {
		return Decision{}
	}
	m.Gen++
	d := Decision{Key: m.Key, Gen: m.Gen, MemLimit: m.MemLimit, Reason: ReasonMemCredit}
	a.record(m, d)
	return d
}

// MemCreditReturn ends credit id of host h: what is left goes back to
// the pool, and members left unassigned are given memory.
func (a *Books) MemCreditReturn(h HostID, id uint64) ([]Decision, error) {
	c := a.credits[h]
	if c == nil || c.id != id {
		return nil, ErrNoCredit
	}
	a.creditTotal -= c.bytes
	delete(a.credits, h)
	return a.FillPending(), nil
}

// MemCreditDrop forgets host h's credit (its session ended).
func (a *Books) MemCreditDrop(h HostID) []Decision {
	c := a.credits[h]
	if c == nil {
		return nil
	}
	a.creditTotal -= c.bytes
	delete(a.credits, h)
	return a.FillPending()
}
