package server

import "net/http"

// identity wires the reloadable TLS files (Config.Identity) in: their
// expiry on /metrics, and the deny-list for what is already open. New
// handshakes read the files loaded last by themselves (auth.Identity).
func (s *Server) identity() {
	id := s.cfg.Identity
	s.met.reg.MustRegister(id.Collector())
	id.OnReload(s.endDeniedSessions)
}

// endDeniedSessions closes the daemon sessions whose certificate the
// deny-list now names: refused at the next handshake, a revoked host must
// not keep the session it opened before.
func (s *Server) endDeniedSessions() {
	s.hosts.Range(func(_, v any) bool {
		h := v.(*host)
		if cs, ok := h.sess.TLS(); ok {
			if serial := s.cfg.Identity.Denied(cs.PeerCertificates); serial != "" {
				s.log.Warn("daemon session ended: its certificate is on the deny-list", "host", h.hello.GetHostId(), "session", h.id, "serial", serial)
				h.sess.Close()
			}
		}
		return true
	})
}

// deniedCaller is the deny-listed serial of an admin request's client
// certificate: an HTTP connection kept open from before the deny-list
// named it is refused request by request.
func (s *Server) deniedCaller(r *http.Request) string {
	if s.cfg.Identity == nil || r.TLS == nil {
		return ""
	}
	return s.cfg.Identity.Denied(r.TLS.PeerCertificates)
}

// caller names an admin request's client: the common name of its verified
// certificate (an operator issued with escractl certs --user NAME is NAME)
// and that certificate's serial; "-" in plain mode.
func caller(r *http.Request) (name, serial string) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "-", ""
	}
	leaf := r.TLS.VerifiedChains[0][0]
	return leaf.Subject.CommonName, leaf.SerialNumber.Text(16)
}
