package agent

import (
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// memCredit is one app's host-local memory credit (docs/daemon.md,
// "Host-local memory credit"): what the controller lent this host, the
// app's OOM step, and the containers it may serve with their max_memory.
type memCredit struct {
	id      uint64
	bytes   int64
	step    int64
	members map[uint32]int64 // handle → max_memory (0: none)
}

// Grant implements rescue.Credit: an OOM of c is answered from its app's
// credit when the credit serves c and holds what the controller would
// grant, max(the app's OOM step, the pages the allocation wants), or at
// least those pages (the controller grants what its pool has down to
// them). The raise never passes the container's own limit (Docker's, or
// the group's when escrad took it over; unknown: no credit) nor its
// max_memory. The use is queued for the session's writer while memMu is
// held, so a revoke's return (sent after MemCredit took memMu) follows it
// on the wire; nothing here writes to the network.
func (a *Agent) Grant(c *rescue.Container, ev rescue.Event) (int64, bool) {
	a.memMu.Lock()
	defer a.memMu.Unlock()
	mc := a.memCredits[c.App]
	if mc == nil || mc.bytes < 4096 {
		return 0, false
	}
	maxB, ok := mc.members[c.H]
	if !ok || c.Ceiling == 0 {
		return 0, false
	}
	need := max(int64(min(ev.Pages, 1<<28))*4096, 4096)
	var amount int64
	_, now, err := a.app.RaiseMemoryFrom(c.H, func(cur int64) int64 {
		// The kernel holds the limit in whole pages (a written limit
		// reads back rounded down, as the trap saw it).
		base := cur &^ 4095
		if cur <= 0 || cur == cgroups.Max || (ev.Limit > 0 && base > ev.Limit) {
			return 0 // unlimited, or raised since: not ours to answer
		}
		room := min(max(mc.step, need), mc.bytes)
		if c.Ceiling != cgroups.Max {
			room = min(room, c.Ceiling-base)
		}
		if maxB > 0 {
			room = min(room, maxB-base)
		}
		if room &^= 4095; room < need {
			return 0
		}
		amount = room
		return base + room
	})
	if err != nil {
		a.log.Warn("raising memory limit from credit failed", "name", c.Name, "err", err)
		return 0, false
	}
	if amount <= 0 {
		return 0, false
	}
	mc.bytes -= amount
	// A send that fails means the session is ending: MemCreditLost
	// follows, and the controller holds the credit it lent.
	_ = a.link.MemCreditUse(&pb.MemCreditUse{App: c.App, CreditId: mc.id, Handle: c.H, AmountBytes: amount, LimitBytes: now})
	return now, true
}

// MemCredit implements link.MemCreditHandler: a grant adds to the app's
// credit (a new id replaces it), a members list replaces the containers
// it serves, and a revoke is answered with what is left of that credit
// (0 when it is not the one held) and zeroes it.
func (a *Agent) MemCredit(l *pb.MemCredit) *pb.MemCreditReturn {
	a.memMu.Lock()
	defer a.memMu.Unlock()
	mc := a.memCredits[l.App]
	if l.Revoke {
		ret := &pb.MemCreditReturn{App: l.App, CreditId: l.CreditId}
		if mc != nil && mc.id == l.CreditId {
			ret.RemainingBytes = mc.bytes
			delete(a.memCredits, l.App)
		}
		return ret
	}
	if len(l.App) > 128 || len(l.Members) > 1<<16 || l.AddBytes < 0 {
		return nil
	}
	if mc == nil || mc.id != l.CreditId {
		if l.AddBytes == 0 {
			return nil // the list of a credit not held
		}
		mc = &memCredit{id: l.CreditId, members: map[uint32]int64{}}
		if a.memCredits == nil {
			a.memCredits = map[string]*memCredit{}
		}
		a.memCredits[l.App] = mc
	}
	if l.StepBytes > 0 {
		mc.step = min(l.StepBytes, 1<<40)
	}
	if l.MembersSet {
		clear(mc.members)
		for _, m := range l.Members {
			mc.members[m.Handle] = max(m.MaxBytes, 0)
		}
	}
	mc.bytes = min(mc.bytes+min(l.AddBytes, 1<<50), 1<<50) // bounded: no overflow on hostile input
	return nil
}

// MemCreditLost implements link.MemCreditHandler: the session ended, and
// the controller dropped (or holds) its side of every credit.
func (a *Agent) MemCreditLost() {
	a.memMu.Lock()
	clear(a.memCredits)
	a.memMu.Unlock()
}

// MemCreditOf is app's memory credit: id and bytes (tests).
func (a *Agent) MemCreditOf(app string) (uint64, int64) {
	a.memMu.Lock()
	defer a.memMu.Unlock()
	if mc := a.memCredits[app]; mc != nil {
		return mc.id, mc.bytes
	}
	return 0, 0
}
