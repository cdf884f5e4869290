package server

import (
	"fmt"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// MemCreditUse implements session.MemCreditHandler (host-local memory
// credit): the daemon raised a container's memory limit from its credit
// on an OOM. A use naming an app, credit or container this session does
// not have is dropped and counted.
func (s *Server) MemCreditUse(ss *session.Session, u *pb.MemCreditUse) {
	r := s.containerRef(ss, u.GetHandle())
	if r == nil || r.appName != u.GetApp() {
		s.BadInput(ss, "mem_credit_unknown", fmt.Errorf("memory credit use for unknown container %d of app %q", u.GetHandle(), u.GetApp()))
		return
	}
	bad := func(reason string, err error) { s.BadInput(ss, reason, err) }
	r.app.MemCreditUse(allocator.HostID(ss.ID), u.GetCreditId(), r.key, u.GetAmountBytes(), u.GetLimitBytes(), bad)
}

// MemCreditReturn implements session.MemCreditHandler: the answer to a
// revoke.
func (s *Server) MemCreditReturn(ss *session.Session, cr *pb.MemCreditReturn) {
	s.mu.RLock()
	a := s.apps[cr.GetApp()]
	s.mu.RUnlock()
	if a == nil || s.host(ss.ID) == nil {
		s.BadInput(ss, "mem_credit_unknown", fmt.Errorf("memory credit return for unknown app %q", cr.GetApp()))
		return
	}
	a.MemCreditReturn(allocator.HostID(ss.ID), cr.GetCreditId(), func(reason string, err error) { s.BadInput(ss, reason, err) })
}
