package agent

import (
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

type leaseCredit struct {
	id uint64
	us int64
}

// leaseRaise answers a throttle event from the app's lease credit, if
// any (host-local leases): the quota grows at once by
// min(credit, max(quota, credit/2)), capped at host cores × period, and
// the use is reported. It reports whether the event was covered: the
// raise at least doubled the quota, the escra policy's own first step.
// A smaller raise is relief until the controller's answer, so the event
// still goes to the controller (a lease smaller than a burst must not
// hold back the policy's raise; a 3-host test under load starved a
// container that way).
func (a *Agent) leaseRaise(h uint32) bool {
	seen := time.Now()
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil || a.cpu.manages(h) {
		// A C1 container's quota moves with its cpuset: only through
		// the allocator (the controller's answer to the event).
		return false
	}
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	c := a.credit[m.c.App]
	if c == nil || c.us <= 0 {
		return false
	}
	var amount int64
	quota, err := a.app.RaiseCPU(h, func(cur int64, periodUs uint32) int64 {
		if cur <= 0 || periodUs == 0 {
			return 0 // unlimited, or unknown period
		}
		amount = min(c.us, max(cur, c.us/2), a.cores*int64(periodUs)-cur)
		return cur + max(amount, 0)
	})
	if err != nil || amount <= 0 {
		if err != nil {
			a.log.Warn("lease raise failed", "name", m.c.Name, "err", err)
		}
		return false
	}
	c.us -= amount
	took := time.Since(seen)
	a.m.leaseRaise.Observe(took.Seconds())
	if a.cfg.OnLeaseRaise != nil {
		a.cfg.OnLeaseRaise(h, took)
	}
	a.m.leaseUses.Inc()
	// Sent while leaseMu is held (see Agent.credit). A send that fails
	// means the session is ending: LeasesLost follows.
	_ = a.link.LeaseUse(&pb.CpuLeaseUse{App: m.c.App, LeaseId: c.id, Handle: h, AmountUs: amount, QuotaUs: quota})
	return amount >= quota-amount
}

// Lease implements link.LeaseHandler: a grant adds to the app's credit (a
// new lease id replaces it); a revoke is answered with what is left of
// that lease (0 when it is not the one held) and zeroes it.
func (a *Agent) Lease(l *pb.CpuLease) *pb.CpuLeaseReturn {
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	c := a.credit[l.App]
	if l.Revoke {
		ret := &pb.CpuLeaseReturn{App: l.App, LeaseId: l.LeaseId}
		if c != nil && c.id == l.LeaseId {
			ret.RemainingUs = c.us
			delete(a.credit, l.App)
		}
		return ret
	}
	if l.AddUs <= 0 || len(l.App) > 128 {
		return nil
	}
	if c == nil || c.id != l.LeaseId {
		c = &leaseCredit{id: l.LeaseId}
		a.credit[l.App] = c
	}
	c.us = min(c.us+min(l.AddUs, 1<<40), 1<<40) // bounded: no overflow on hostile input
	return nil
}

// LeasesLost implements link.LeaseHandler: the session ended, and the
// controller dropped its side of every lease.
func (a *Agent) LeasesLost() {
	a.leaseMu.Lock()
	clear(a.credit)
	a.leaseMu.Unlock()
}

// LeaseCredit is app's credit: lease id and µs (tests).
func (a *Agent) LeaseCredit(app string) (uint64, int64) {
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	if c := a.credit[app]; c != nil {
		return c.id, c.us
	}
	return 0, 0
}
