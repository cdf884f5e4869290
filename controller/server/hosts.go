package server

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/ingest"
	placementpkg "github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/internal/auth"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// host is one daemon session: its hello, its containers by handle and
// its telemetry key.
type host struct {
	id    uint32
	sess  *session.Session
	hello *pb.HostHello
	maxUs int64
	since time.Time
	scope scope      // the apps it may register (scope.go)
	peer  netip.Addr // the session's TCP peer: its telemetry's source (limits.go)

	mu sync.RWMutex
	// cont holds refs by value: the UDP reader looks one up per
	// statistic, and a pointer would cost one more cache miss each.
	cont refs

	// deps is the host's image and layer state (dependency-aware
	// scheduling), nil until its daemon reports it.
	deps atomic.Pointer[placementpkg.HostDeps]

	// Authenticated telemetry (nil in plain mode); used under the UDP
	// listener's lock only.
	tauth *ingest.SessionAuth
	// datagrams counts the telemetry datagrams taken for the session
	// (authenticated, in order, with stats): what a flood cost it.
	datagrams atomic.Uint64
}

// ref is a registered container: its app and allocator key.
type ref struct {
	app     *app.App
	key     allocator.Key
	appName string
	id      string
}

func key(session, handle uint32) allocator.Key {
	return allocator.Key(uint64(session)<<32 | uint64(handle))
}

func (s *Server) host(id uint32) *host {
	v, ok := s.hosts.Load(id)
	if !ok {
		return nil
	}
	return v.(*host)
}

// Hello registers a host and answers with its session id.
func (s *Server) Hello(ss *session.Session, h *pb.HostHello) (*pb.HelloAck, error) {
	if may := s.mayAct(); !s.leading.Load() || (may != nil && !may()) {
		return nil, s.notLeader()
	}
	cores := int64(h.GetCores())
	if cores <= 0 || cores > 1<<16 {
		cores = 1
	}
	hs := &host{id: ss.ID, sess: ss, hello: h, maxUs: cores * s.cfg.Params.PeriodUs(), since: time.Now()}
	if s.cfg.TLS != nil {
		cs, ok := ss.TLS()
		if !ok {
			return nil, errors.New("plain session on a TLS controller")
		}
		if err := auth.PeerHost(cs, h.GetHostId()); err != nil {
			s.met.bad("identity", 1)
			return nil, err
		}
		key, err := auth.TelemetryKey(cs, ss.ID)
		if err != nil {
			return nil, err
		}
		hs.tauth = ingest.NewSessionAuth(key)
	}
	hs.scope = s.hostScope(ss, h)
	hs.peer = peerAddr(ss.Peer)
	// A host reconnecting (after a partition its old session may not have
	// timed out yet) replaces its old session: one session per host id, and
	// the old one's members stop holding budget now.
	var stale []*session.Session
	s.hosts.Range(func(_, v any) bool {
		if o := v.(*host); o.hello.GetHostId() == h.GetHostId() {
			stale = append(stale, o.sess)
		}
		return true
	})
	for _, o := range stale {
		s.log.Warn("a new session of the host replaces its old one", "host", h.GetHostId(), "old_session", o.ID, "session", ss.ID)
		s.Closed(o)
		o.Close()
	}
	s.hosts.Store(ss.ID, hs)
	if !s.leading.Load() { // stepped down meanwhile
		s.hosts.Delete(ss.ID)
		return nil, s.notLeader()
	}
	// Its containers register now; holds of ones that do not (removed
	// while it was silent) end after the grace (app.HostBack).
	for _, a := range s.appList() {
		a.HostBack(h.GetHostId(), s.hostBackGrace())
	}
	s.log.Info("daemon connected", "host", h.GetHostId(), "session", ss.ID, "cores", h.GetCores(),
		"backend", h.GetBackend().String(), "peer", ss.Peer)
	taddr := s.UDPAddr()
	if s.cfg.TelemetryAdvertise != "" {
		taddr = s.cfg.TelemetryAdvertise
	}
	return &pb.HelloAck{SessionId: ss.ID, PeriodUs: uint32(s.cfg.Params.PeriodUs()), TelemetryAddr: taddr, Term: s.term.Load()}, nil
}

// hostBackGrace is how long a host that has a session again has to
// register its containers before the holds of the ones it does not end:
// RejoinGrace, 3 s when that is off.
func (s *Server) hostBackGrace() time.Duration {
	if g := s.cfg.RejoinGrace; g > 0 {
		return g
	}
	return 3 * time.Second
}

// Closed removes the host and its containers.
func (s *Server) Closed(ss *session.Session) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	s.hosts.Delete(ss.ID)
	s.udp.EndSession(ss.ID)
	h.mu.Lock()
	gone := h.cont
	h.cont = refs{}
	h.mu.Unlock()
	// The host is silent: what its containers' cgroups may hold (its
	// last limits, an OOM raised to a container's own limit, the own
	// limits put back after --restore-after) stays out of the pools until
	// they rejoin (allocator/hold.go). Otherwise a partitioned host and
	// its siblings would exceed the budget together.
	hold := s.cfg.DeadHold
	gone.each(func(_ uint32, r ref) {
		s.releaseID(ss.ID, r.id)
		r.app.LeaveHeld(r.key, "daemon session closed", hold)
	})
	gone.each(func(_ uint32, r ref) { s.reap(r.app) })
	// The daemon dropped its lease credit with the session (host-local leases).
	for _, a := range s.appList() {
		a.HostClosed(allocator.HostID(ss.ID), h.hello.GetHostId(), hold)
	}
	s.log.Info("daemon disconnected", "host", h.hello.GetHostId(), "session", ss.ID, "containers", gone.len())
}

// BadInput counts and logs (rate-limited) a dropped message.
func (s *Server) BadInput(ss *session.Session, reason string, err error) {
	s.met.bad(reason, 1)
	s.rl.Warn(ss.Peer, "bad input from daemon dropped", "reason", reason, "err", err)
}

// DecisionSent implements session.Observer.
func (s *Server) DecisionSent(d time.Duration) {
	s.decLat.Observe(d)
	s.met.decisionLatency.Observe(d.Seconds())
}

// VerdictSent implements session.Observer.
func (s *Server) VerdictSent(d time.Duration) {
	s.oomLat.Observe(d)
	s.met.verdictLatency.Observe(d.Seconds())
}
