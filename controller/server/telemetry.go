package server

import (
	"fmt"

	"github.com/escra-dev/escra/controller/ingest"
)

// onTelemetry routes one datagram's stats to their apps (ingest.Sink).
func (s *Server) onTelemetry(sessionID uint32, stats []ingest.Stat, recv int64) {
	h := s.host(sessionID)
	if h == nil {
		s.met.bad("unknown_session", len(stats))
		s.rl.Warn(fmt.Sprintf("session %d", sessionID), "telemetry for an unknown session dropped")
		return
	}
	h.datagrams.Add(1)
	unknown := 0
	h.mu.RLock()
	for _, st := range stats {
		r, ok := h.cont.get(st.Handle)
		if !ok {
			unknown++
			continue
		}
		if st.MidPeriod {
			r.app.ThrottleEvent(r.key, st.Seq, recv)
			continue
		}
		r.app.CPUStat(r.key, st, recv)
	}
	h.mu.RUnlock()
	// A datagram comes from one host: its updates leave in one envelope.
	h.sess.Wake()
	if unknown > 0 {
		s.met.bad("unknown_container", unknown)
	}
}

func (s *Server) dropTelemetry(reason string, n int) { s.met.bad(reason, n) }

// Verify implements ingest.Authenticator: the datagram's tag must check
// out with its session's key.
func (s *Server) Verify(session uint32, datagram []byte) bool {
	h := s.host(session)
	return h != nil && h.tauth != nil && h.tauth.Verify(datagram)
}

// Known implements ingest.SessionKnower: an open session with a key.
func (s *Server) Known(session uint32) bool {
	h := s.host(session)
	return h != nil && h.tauth != nil
}

// Accept implements ingest.Authenticator: each batch_seq once per session
// (called only after Verify passed, so the session has a key).
func (s *Server) Accept(session uint32, batchSeq uint64) bool {
	h := s.host(session)
	return h != nil && h.tauth != nil && h.tauth.Accept(batchSeq)
}
