package app

import (
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// sendLeases sends lease commands to their hosts, with the revocations
// joins, leaves and budget changes queued.
func (s *App) sendLeases(cmds []allocator.LeaseCmd) {
	cmds = append(cmds, s.a.TakeLeaseCmds()...)
	for _, c := range cmds {
		h := s.hosts[c.Host]
		if h == nil {
			continue // session gone: LeaseDrop forgets the lease
		}
		h.Lease(&pb.CpuLease{App: s.Name, LeaseId: c.ID, AddUs: c.AddUs, Revoke: c.Revoke})
		if c.Revoke {
			s.cnt.Lease("revoke")
		} else {
			s.cnt.Lease("grant")
		}
	}
}

// LeaseUse handles a daemon's CpuLeaseUse: host h raised member k's
// quota by us from lease id. The answer is an ordinary update with the
// quota the controller now counts (reason "lease"), so both views meet.
// bad counts a dropped or clamped use.
func (s *App) LeaseUse(h allocator.HostID, id uint64, k allocator.Key, us int64, bad func(reason string, err error)) {
	s.do(func() {
		d, err := s.a.LeaseUse(h, id, k, us)
		switch err {
		case nil:
			s.cnt.Lease("use")
		case allocator.ErrLeaseOver:
			bad("lease_over", fmt.Errorf("app %s: lease %d use of %d µs beyond the lease", s.Name, id, us))
		default:
			bad("lease_unknown", fmt.Errorf("app %s: lease %d use: %w", s.Name, id, err))
		}
		if d.Gen != 0 {
			s.apply(d, 0, nil)
		}
	})
}

// LeaseReturn handles a daemon's CpuLeaseReturn (the answer to a revoke).
func (s *App) LeaseReturn(h allocator.HostID, id uint64, bad func(reason string, err error)) {
	s.do(func() {
		ds, err := s.a.LeaseReturn(h, id)
		if err != nil {
			bad("lease_unknown", fmt.Errorf("app %s: return of lease %d: %w", s.Name, id, err))
			return
		}
		s.cnt.Lease("return")
		s.applyAll(ds)
	})
}

// HostClosed forgets session h's lease and session (it ended; its
// members leave through LeaveHeld). host is the daemon's host id.
// The lease stays counted like a held member (allocator/hold.go): the
// daemon may have raised quotas from it that nobody has heard of (it was
// partitioned or stopped), until its host rejoins (HostBack) or hold passes.
func (s *App) HostClosed(h allocator.HostID, host string, hold time.Duration) {
	s.do(func() {
		delete(s.hosts, h)
		if us := s.a.LeaseUs(h); us > 0 && hold > 0 {
			id := holdID(host, fmt.Sprintf("lease/%d", h))
			s.a.HoldShare(id, us, 0)
			s.expireHold(id, hold)
		}
		s.applyAll(s.a.LeaseDrop(h))
		s.creditHostClosed(h, hold) // memcredit.go
	})
}
