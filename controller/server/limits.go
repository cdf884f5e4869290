package server

import (
	"net"
	"net/netip"
)

// Rate limits on what daemons send (docs/security.md): a cap on open
// session connections, a message rate per session (session.Config), a
// datagram rate per telemetry source and the telemetry source checked
// against the session's peer (ingest/limits.go).

// peerAddr is the IP address of a session's TCP peer (invalid when it
// cannot be parsed, e.g. an in-memory connection in a test).
func peerAddr(peer string) netip.Addr {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// FromPeer implements ingest.SourceChecker: a session's datagrams come
// from the address its TCP session comes from, unless the operator said
// a relay or NAT sits between (escra-controller --telemetry-any-source).
// Checked before the HMAC, so datagrams from elsewhere cost no MAC. A
// session that is not open passes: it has no key, so Verify refuses it
// without a MAC and it is counted as unknown_session.
func (s *Server) FromPeer(session uint32, addr netip.Addr) bool {
	if s.cfg.TelemetryAnySource {
		return true
	}
	h := s.host(session)
	return h == nil || !h.peer.IsValid() || h.peer == addr
}

// admit takes a slot for a new session connection; false past
// MaxSessions (counted, logged at most once a second per peer). release
// gives the slot back.
func (s *Server) admit(c net.Conn) bool {
	limit := s.cfg.MaxSessions
	if n := s.conns.Add(1); limit > 0 && n > int64(limit) {
		s.conns.Add(-1)
		s.met.bad("connection_cap", 1)
		s.rl.Warn("connection_cap", "session connection refused: at the controller's --max-sessions", "peer", c.RemoteAddr().String(), "max", limit)
		return false
	}
	return true
}

func (s *Server) release() { s.conns.Add(-1) }
