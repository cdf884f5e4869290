package app

import (
	"strings"
	"time"
)

// HoldRaisesFor hands nothing out of the pools for d (allocator
// HoldRaises): the controller just started or took over, and hosts that
// have not rejoined yet may hold what the pools seem to have. Then the
// pools are handed out as usual.
func (s *App) HoldRaisesFor(d time.Duration) {
	s.do(func() {
		s.a.HoldRaises = true
		time.AfterFunc(d, func() {
			s.do(func() {
				s.a.HoldRaises = false
				s.applyAll(s.a.Redistribute())
			})
		})
	})
}

// Holding reports whether the app hands nothing out of its pools now
// (HoldRaisesFor).
func (s *App) Holding() bool {
	var h bool
	s.call(func() { h = s.a.HoldRaises })
	return h
}

// expireHold ends hold id after d unless it was ended or held again.
func (s *App) expireHold(id string, d time.Duration) {
	s.holdSeq++
	seq := s.holdSeq
	s.holds[id] = seq
	time.AfterFunc(d, func() {
		s.do(func() {
			if s.holds[id] == seq { // not rejoined and held again since
				s.log.Warn("hold ended: host silent too long, presumed lost", "hold", id, "after", d)
				delete(s.holds, id)
				s.a.Unhold(id)
				s.applyAll(s.a.Redistribute())
			}
		})
	})
}

// HostBack ends, after grace, the holds of host that are still the ones
// held now: its daemon has a session again and registers every container
// it manages on connect, so a held container that did not rejoin within
// grace is no longer in its cgroups (removed while the host was silent),
// and quota raised from its old lease is in what the rejoined containers
// reported. A hold made later (the new session died too) is kept.
func (s *App) HostBack(host string, grace time.Duration) {
	s.do(func() {
		prefix := host + "/"
		now := map[string]uint64{}
		for id, seq := range s.holds {
			if strings.HasPrefix(id, prefix) {
				now[id] = seq
			}
		}
		if len(now) == 0 {
			return
		}
		time.AfterFunc(grace, func() {
			s.do(func() {
				n := 0
				for id, seq := range now {
					if s.holds[id] == seq {
						delete(s.holds, id)
						s.a.Unhold(id)
						n++
					}
				}
				if n > 0 {
					s.log.Info("host back: holds of containers that did not rejoin ended", "host", host, "holds", n)
					s.applyAll(s.a.Redistribute())
				}
			})
		})
	})
}

func holdID(host, container string) string { return host + "/" + container }
