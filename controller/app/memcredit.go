package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// creditHost is a Host that carries memory credit (*session.Session).
type creditHost interface {
	MemCredit(c *pb.MemCredit)
}

// creditCounter is Counters with memory-credit events (the server's).
type creditCounter interface {
	MemCredit(event string)
}

func (s *App) countCredit(event string) {
	if c, ok := s.cnt.(creditCounter); ok {
		c.MemCredit(event)
	}
}

// lendsMemory reports whether memory credit is lent or outstanding.
func (s *App) lendsMemory() bool { return s.a.MemCreditFraction() > 0 || s.a.MemCredited() > 0 }

// rebalanceCredit is the period's memory-credit round (host-local memory
// credit, allocator/memcredit.go): nothing is lent in recommend mode.
func (s *App) rebalanceCredit() {
	switch {
	case s.recommend:
		if s.a.MemCredited() > 0 {
			s.sendMemCredits(s.a.RebalanceMemCredit(0))
		}
	case len(s.members) > 0 || s.a.MemCredited() > 0:
		s.sendMemCredits(s.a.RebalanceMemCredit(s.a.MemCreditFraction()))
	}
}

// sendMemCredits sends credit commands to their hosts, with the
// revocations joins and OOM requests queued.
func (s *App) sendMemCredits(cmds []allocator.MemCreditCmd) {
	cmds = append(cmds, s.a.TakeMemCreditCmds()...)
	for _, c := range cmds {
		h, ok := s.hosts[c.Host].(creditHost)
		if !ok {
			continue // session gone (MemCreditDrop forgets it) or no credit carrier
		}
		mc := &pb.MemCredit{App: s.Name, CreditId: c.ID, AddBytes: c.AddBytes, Revoke: c.Revoke,
			StepBytes: c.StepBytes, MembersSet: c.MembersSet}
		for _, m := range c.Members {
			mc.Members = append(mc.Members, &pb.MemCreditMember{Handle: m.Handle, MaxBytes: m.MaxBytes})
		}
		h.MemCredit(mc)
		switch {
		case c.Revoke:
			s.countCredit("revoke")
		case c.AddBytes > 0:
			s.countCredit("grant")
		}
	}
}

// MemCreditUse handles a daemon's MemCreditUse: host h raised member k's
// memory limit by bytes (to limit) from credit id. The answer is an
// ordinary update with the limit the controller now counts (reason
// "mem-credit"), so both views meet.
func (s *App) MemCreditUse(h allocator.HostID, id uint64, k allocator.Key, bytes, limit int64, bad func(reason string, err error)) {
	s.do(func() {
		d, err := s.a.MemCreditUse(h, id, k, bytes, limit)
		switch err {
		case nil:
			s.countCredit("use")
			s.cnt.Decision("oom-granted-credit")
		case allocator.ErrCreditOver:
			bad("mem_credit_over", fmt.Errorf("app %s: memory credit %d use of %d B beyond the credit", s.Name, id, bytes))
		default:
			bad("mem_credit_unknown", fmt.Errorf("app %s: memory credit %d use: %w", s.Name, id, err))
		}
		if d.Gen != 0 {
			s.apply(d, 0, nil)
		}
	})
}

// MemCreditReturn handles a daemon's MemCreditReturn (the answer to a
// revoke).
func (s *App) MemCreditReturn(h allocator.HostID, id uint64, bad func(reason string, err error)) {
	s.do(func() {
		ds, err := s.a.MemCreditReturn(h, id)
		if err != nil {
			bad("mem_credit_unknown", fmt.Errorf("app %s: return of memory credit %d: %w", s.Name, id, err))
			return
		}
		s.countCredit("return")
		s.applyAll(ds)
	})
}

// creditHostClosed forgets host h's memory credit, held for hold: the
// daemon may have raised limits from it that nobody has heard of.
func (s *App) creditHostClosed(h allocator.HostID, hold time.Duration) {
	name := s.creditHostName(h)
	if b := s.a.MemCredit(h); b > 0 && hold > 0 {
		id := fmt.Sprintf("mem-credit/%s/%d", name, h)
		s.a.HoldShare(id, 0, b)
		s.expireHold(id, hold)
	}
	delete(s.sessionHosts, h)
	s.applyAll(s.a.MemCreditDrop(h))
}

// creditHostName is the host id of session h's members ("" when none
// joined through this app).
func (s *App) creditHostName(h allocator.HostID) string {
	for _, m := range s.members {
		if m.Key.Host() == h {
			return m.HostID
		}
	}
	return s.sessionHosts[h] // its members left just before (LeaveHeld)
}

// creditRejoined ends the credit held for mi's host once every container
// held for that host has rejoined: their registrations report the limits
// their cgroups hold, local raises from the credit included, and the
// joins count those.
func (s *App) creditRejoined(mi MemberInfo) {
	if s.sessionHosts == nil {
		s.sessionHosts = map[allocator.HostID]string{}
	}
	s.sessionHosts[mi.Key.Host()] = mi.HostID
	prefix := mi.HostID + "/"
	var credit []string
	for id := range s.holds {
		switch {
		case strings.HasPrefix(id, prefix):
			return // a container of the host is still away
		case strings.HasPrefix(id, "mem-credit/"+prefix):
			credit = append(credit, id)
		}
	}
	for _, id := range credit {
		delete(s.holds, id)
		s.a.Unhold(id)
	}
}
