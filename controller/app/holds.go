package app

import "time"

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
				delete(s.holds, id)
				s.a.Unhold(id)
				s.applyAll(s.a.Redistribute())
			}
		})
	})
}

func holdID(host, container string) string { return host + "/" + container }
