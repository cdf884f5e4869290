package allocator

import (
	"errors"
	"maps"
	"slices"
)

// Host-local CPU leases. The controller
// lends each host a slice of an app's unallocated runtime that the host's
// daemon may add to a throttled container on its own, without a round
// trip; the daemon reports every use. A lease counts as allocated from the
// moment it is granted until it is used (it becomes the container's quota)
// or returned, so
//
//	Σ_λ q_i + Σ_hosts L_h ≤ Ω·P
//
// holds on the controller at all times, and what a daemon may apply never
// exceeds it: a daemon applies at most its lease beyond the quotas the
// controller assigned. Uses and returns travel on the same ordered TCP
// session, so a return accounts for every use the daemon made before it.
//
// Shrinking is revoke-then-regrant: a revoked lease still counts until the
// daemon's return arrives. Paths that need CPU at once (a join, the floor
// after a leave, a smaller budget) revoke every lease of the app and take
// what the pool has; what the revoked leases give back is handed out by
// the next decisions (members below the floor first). During that one
// round trip a newcomer may sit below its floor, and after a budget cut
// Σ q + Σ L may exceed the new Ω until the returns arrive.

// HostID names a daemon session (the high half of a Key).
type HostID uint32

// Host is the session a member's daemon is on.
func (k Key) Host() HostID { return HostID(uint64(k) >> 32) }

type lease struct {
	id       uint64
	us       int64
	revoking bool
}

// LeaseCmd is what the controller tells one host about its lease.
type LeaseCmd struct {
	Host HostID
	ID   uint64 // lease id; a revoke names the lease it revokes
	// AddUs grows the lease (a grant); 0 with Revoke set asks for it back.
	AddUs  int64
	Revoke bool
}

var (
	ErrNoLease    = errors.New("allocator: no such lease")
	ErrLeaseOver  = errors.New("allocator: lease use beyond the lease")
	ErrLeaseOwner = errors.New("allocator: lease used for a member of another host")
)

// inPeriodPolicy is a policy that reacts inside a period (OnThrottle); only
// such a policy's apps lend leases: a host's lease raise is that reaction
// taken locally, and escra-paper, which waits for the period's end, must
// stay the Escra paper's rule exactly.
type inPeriodPolicy interface{ ReactsInPeriod() bool }

// LeaseFraction is the share of the unallocated CPU this app lends (0:
// none, also when its policy does not react inside a period).
func (a *Books) LeaseFraction() float64 {
	if p, ok := a.Policy.(inPeriodPolicy); ok && p.ReactsInPeriod() {
		return a.P.LeaseFraction
	}
	return 0
}

// LeaseUs is host h's outstanding lease (0: none).
func (a *Books) LeaseUs(h HostID) int64 {
	if l := a.leases[h]; l != nil {
		return l.us
	}
	return 0
}

// LeasedUs is Σ outstanding leases.
func (a *Books) LeasedUs() int64 { return a.leaseTotal }

// RebalanceLeases sets each host with members toward a lease of
// frac × (Ω − Σ q) × (its members / λ): a raise is granted at once from
// the pool; a lease more than twice its target is revoked (and granted
// again after the return). It returns the commands to send.
func (a *Books) RebalanceLeases(frac float64) []LeaseCmd {
	if frac <= 0 || len(a.order) == 0 {
		return a.revokeAll()
	}
	if a.HoldRaises {
		return nil
	}
	var out []LeaseCmd
	for h, l := range a.leases { // hosts without members give theirs back
		if !l.revoking && !a.hasMembers(h) {
			l.revoking = true
			out = append(out, LeaseCmd{Host: h, ID: l.id, Revoke: true})
		}
	}
	free := a.omegaUs - a.cpuAlloc - a.cpuExtra - a.heldCPU
	for i := 0; i < len(a.order); {
		h, end := a.nextRun(i)
		n := end - i
		i = end
		target := int64(frac * float64(free) * float64(n) / float64(len(a.order)))
		l := a.leases[h]
		if l == nil {
			l = &lease{}
			a.leases[h] = l
		}
		switch {
		case l.revoking:
		case l.us > 2*target+a.P.MinStepUs:
			l.revoking = true
			out = append(out, LeaseCmd{Host: h, ID: l.id, Revoke: true})
		case target-l.us > a.P.MinStepUs:
			add := min(target-l.us, a.CPUUnallocatedUs())
			if add <= 0 {
				continue
			}
			if l.us == 0 {
				a.leaseSeq++
				l.id = a.leaseSeq
			}
			l.us += add
			a.leaseTotal += add
			out = append(out, LeaseCmd{Host: h, ID: l.id, AddUs: add})
		}
	}
	return out
}

// revokeAll asks every lease back (a join, a leave or a budget change
// needs the pool now).
func (a *Books) revokeAll() []LeaseCmd {
	var out []LeaseCmd
	for _, h := range sortedHosts(a.leases) {
		if l := a.leases[h]; l.us > 0 && !l.revoking {
			l.revoking = true
			out = append(out, LeaseCmd{Host: h, ID: l.id, Revoke: true})
		}
	}
	return out
}

// TakeLeaseCmds returns (and forgets) the revocations that joins, leaves
// and budget changes queued.
func (a *Books) TakeLeaseCmds() []LeaseCmd {
	out := a.pendingLease
	a.pendingLease = nil
	return out
}

func (a *Books) queueRevokeAll() {
	a.pendingLease = append(a.pendingLease, a.revokeAll()...)
}

// LeaseUse records that host h's daemon added us of lease id to member k's
// quota. The lease shrinks and the quota grows by the same amount, so Σ
// is unchanged. A use beyond the lease (a daemon bug or a forged message)
// is clamped to it and reported; the returned decision carries the new
// quota so the daemon's and the controller's views meet again.
func (a *Books) LeaseUse(h HostID, id uint64, k Key, us int64) (Decision, error) {
	l := a.leases[h]
	m := a.members[k]
	switch {
	case l == nil || l.id != id || us <= 0:
		if m != nil && k.Host() == h {
			// The daemon may have written a quota nobody counts: answer
			// with the one counted so it converges.
			return a.reassert(m), ErrNoLease
		}
		return Decision{}, ErrNoLease
	case m == nil:
		return Decision{}, ErrUnknown
	case k.Host() != h:
		return Decision{}, ErrLeaseOwner
	}
	var err error
	if us > l.us {
		us, err = l.us, ErrLeaseOver
	}
	us = min(us, max(0, m.HostMaxUs-m.QuotaUs))
	l.us -= us
	a.leaseTotal -= us
	m.ThrottleEvents++
	d := a.decide(m, m.QuotaUs+us, 0, ReasonLease)
	if d.Gen == 0 { // nothing added (clamped): still answer the use
		d = a.reassert(m)
	}
	return d, err
}

// reassert is a decision that repeats m's counted quota under a new
// generation: the answer to a use that added nothing.
func (a *Books) reassert(m *Member) Decision {
	if m.QuotaUs <= 0 {
		return Decision{}
	}
	m.Gen++
	return Decision{Key: m.Key, Gen: m.Gen, QuotaUs: m.QuotaUs, Reason: ReasonLease}
}

// LeaseRevoking reports whether a revoked lease has not come back yet:
// until it does, a member may sit below the floor and, after a budget
// cut, Σ quotas + Σ leases may exceed Ω.
func (a *Books) LeaseRevoking() bool {
	for _, l := range a.leases {
		if l.revoking {
			return true
		}
	}
	return false
}

// LeaseReturn ends lease id of host h: whatever is left goes back to the
// pool, and members the revocation left below the floor are raised.
func (a *Books) LeaseReturn(h HostID, id uint64) ([]Decision, error) {
	l := a.leases[h]
	if l == nil || l.id != id {
		return nil, ErrNoLease
	}
	a.leaseTotal -= l.us
	delete(a.leases, h)
	return a.ensureFloor(), nil
}

// LeaseDrop forgets host h's lease (its session ended: it can no longer
// use it, and its members leave).
func (a *Books) LeaseDrop(h HostID) []Decision {
	l := a.leases[h]
	if l == nil {
		return nil
	}
	a.leaseTotal -= l.us
	delete(a.leases, h)
	return a.ensureFloor()
}

func sortedHosts[V any](m map[HostID]V) []HostID { return slices.Sorted(maps.Keys(m)) }
