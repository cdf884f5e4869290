package server

import (
	"fmt"
	"slices"

	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/internal/auth"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// scope is what one host may register: the apps its certificate binds
// (auth.CertApps) plus those --host-apps names for it. A host whose
// identity is proven (mutual TLS) is always scoped, and one bound to no
// app registers nothing: a stolen host key moves only the budgets of the
// apps it is bound to (docs/security.md). A plain session (--insecure) has
// no proven identity; it is scoped only when --host-apps names its host.
type scope struct {
	scoped bool
	apps   []string
}

func (s *Server) hostScope(ss *session.Session, h *pb.HostHello) scope {
	extra, named := s.cfg.HostApps[h.GetHostId()]
	sc := scope{scoped: named, apps: slices.Clone(extra)}
	if cs, ok := ss.TLS(); ok && s.cfg.TLS != nil {
		sc.scoped = true
		sc.apps = append(sc.apps, auth.PeerApps(cs)...)
	}
	if sc.scoped && len(sc.apps) == 0 {
		s.met.bad("host_unbound", 1)
		s.log.Warn("host is bound to no app: it registers no container until bound (escractl certs --apps, or the controller's --host-apps)",
			"host", h.GetHostId(), "session", ss.ID)
	}
	return sc
}

// allows is false for an app the host is not bound to.
func (sc scope) allows(app string) bool {
	return !sc.scoped || slices.Contains(sc.apps, auth.AnyApp) || slices.Contains(sc.apps, app)
}

// checkScope refuses a registration outside the host's scope, and claims
// its container id: one another live session (or another handle of this
// one) already holds is refused, as Docker's ids are random and a second
// claim on one is made up. What a host reports is otherwise its word; the
// damage a lying host can do is bounded by its scope and by
// --host-max-share. A claim is released with releaseID.
func (s *Server) checkScope(ss uint32, h *host, r *pb.ContainerRegister) error {
	if !h.scope.allows(r.GetApp()) {
		s.met.bad("app_not_allowed", 1)
		return fmt.Errorf("register: host %s is not bound to app %q (its certificate's apps, or the controller's --host-apps)", h.hello.GetHostId(), r.GetApp())
	}
	id := r.GetContainerId()
	if id == "" {
		if h.scope.scoped {
			s.met.bad("container_id", 1)
			return fmt.Errorf("register: host %s sent no container id", h.hello.GetHostId())
		}
		return nil
	}
	if holder, taken := s.containerIDs.LoadOrStore(id, ss); taken {
		s.met.bad("container_id_taken", 1)
		who := "another handle of this session"
		if o := s.host(holder.(uint32)); o != nil && o != h {
			who = "host " + o.hello.GetHostId()
		}
		return fmt.Errorf("register: container %.12s is already registered by %s", id, who)
	}
	return nil
}

// releaseID gives up session ss's claim on a container id.
func (s *Server) releaseID(ss uint32, id string) {
	if id != "" {
		s.containerIDs.CompareAndDelete(id, ss)
	}
}
