package session

import (
	"errors"

	pb "github.com/escra-dev/escra/proto/escrapb"
)

// acked answers the waiters of a SetLimits the daemon acknowledged; one
// whose update the daemon deferred waits for its late ack (hold).
func (s *Session) acked(id uint64, ack *pb.SetLimitsAck) {
	r := s.take(id)
	if r == nil {
		return // no waiters, or late after a timeout
	}
	for _, w := range r.waiters {
		err := ErrNotAcked
		held := false
		for _, a := range ack.GetApplied() {
			if a.GetHandle() == w.handle && a.GetGeneration() >= w.gen {
				err = nil
				if a.GetError() != "" {
					err = errors.New(a.GetError())
				} else {
					held = a.GetDeferred()
				}
				break
			}
		}
		if held {
			if err = s.hold(w); err == errHeld {
				continue
			}
		}
		w.cb.call(err)
	}
	s.recycle(r)
}

// recycle keeps an answered SetLimits rpc for the next one (drain).
func (s *Session) recycle(r *rpc) {
	if r.onReclaim != nil || r.onReply != nil || len(r.waiters) > 256 {
		return
	}
	clear(r.waiters)
	r.waiters = r.waiters[:0]
	s.mu.Lock()
	if len(s.rpcFree) < 16 {
		s.rpcFree = append(s.rpcFree, r)
	}
	s.mu.Unlock()
}

// maxDeferred bounds the acknowledgements held per handle; beyond it the
// oldest is answered ErrNotAcked (its limit stays counted, which is safe).
const maxDeferred = 256

var errHeld = errors.New("session: acknowledgement held")

// hold keeps w until the daemon's late ack covers it: errHeld when kept,
// nil when a late ack already did, ErrClosed after shutdown.
func (s *Session) hold(w waiter) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.lateGen[w.handle] >= w.gen:
		s.mu.Unlock()
		return nil
	}
	if s.deferred == nil {
		s.deferred = map[uint32][]waiter{}
	}
	ws := append(s.deferred[w.handle], w)
	var evicted *waiter
	if len(ws) > maxDeferred {
		ev := ws[0]
		evicted, ws = &ev, ws[1:]
	}
	s.deferred[w.handle] = ws
	s.mu.Unlock()
	if evicted != nil {
		evicted.cb.call(ErrNotAcked)
	}
	return errHeld
}

// lateAcked answers held acknowledgements the daemon now confirms.
func (s *Session) lateAcked(ack *pb.SetLimitsAck) {
	var done []waiter
	s.mu.Lock()
	for _, a := range ack.GetApplied() {
		if a.GetError() != "" || a.GetGeneration() == 0 {
			continue
		}
		h, gen := a.GetHandle(), a.GetGeneration()
		if s.lateGen == nil {
			s.lateGen = map[uint32]uint64{}
		}
		s.lateGen[h] = max(s.lateGen[h], gen)
		keep := s.deferred[h][:0]
		for _, w := range s.deferred[h] {
			if w.gen <= gen {
				done = append(done, w)
			} else {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(s.deferred, h)
		} else {
			s.deferred[h] = keep
		}
	}
	s.mu.Unlock()
	for _, w := range done {
		w.cb.call(nil)
	}
}
