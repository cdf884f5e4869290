package session

import (
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// verdict is an envelope queued for the writer (an OOM verdict or any
// other), with when what caused it arrived, for the Observer.
type verdict struct {
	env      *pb.Envelope
	received time.Time
}

// Verdict answers an OOM request.
func (s *Session) Verdict(requestID uint64, v *pb.OomVerdict, received time.Time) {
	s.sendEnv(&pb.Envelope{RequestId: requestID, Body: &pb.Envelope_OomVerdict{OomVerdict: v}}, received)
}

// Lease sends a CpuLease grant or revoke. It goes out after the limit
// updates queued with it (one writer round), never before.
func (s *Session) Lease(l *pb.CpuLease) {
	s.sendEnv(&pb.Envelope{Body: &pb.Envelope_CpuLease{CpuLease: l}}, time.Time{})
}

func (s *Session) sendEnv(env *pb.Envelope, received time.Time) {
	s.mu.Lock()
	if !s.closed {
		s.envs = append(s.envs, verdict{env: env, received: received})
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writer state, guarded by Session.wmu: whoever holds it owns the
// connection's write side.
type writer struct {
	buf     []byte
	left    []byte // unsent tail of a non-blocking write; goes out first
	sl      pb.SetLimits
	slBody  pb.Envelope_SetLimits
	slEnv   pb.Envelope
	updates []Update
	lus     []pb.LimitUpdate
	lims    []pb.Limits
	envs    []verdict
	// The non-blocking write of Wake: its function is made once, its
	// result left here.
	write func(fd uintptr) bool
	n     int
	werr  error
}

func (w *writer) rawWrite(fd uintptr) bool {
	w.n, w.werr = unix.Write(int(fd), w.buf)
	return true // never wait for the socket to drain
}

// drain moves everything queued into w.buf (after any leftover bytes).
// Every update pending for this host goes in one SetLimits envelope.
func (s *Session) drain(w *writer) error {
	// A leader stopped past its lease (SIGSTOP, a paused VM) wakes with
	// decisions due before the goroutine that ends its leadership has run:
	// the clock, not that goroutine, says whether it may still act.
	if s.cfg.MayAct != nil && !s.cfg.MayAct() {
		return ErrNotLeading
	}
	s.mu.Lock()
	clear(w.updates) // drop the callbacks the last round held
	w.updates = append(w.updates[:0], s.queue...)
	clear(s.pending)
	clear(s.queue)
	s.queue = s.queue[:0]
	w.envs = s.envs
	s.envs = nil
	var id uint64
	if len(w.updates) > 0 {
		s.nextID++
		id = s.nextID
		var r *rpc
		for i := range w.updates {
			u := &w.updates[i]
			a := u.ackTo()
			if len(u.merged) == 0 && !a.set() {
				continue
			}
			if r == nil {
				r = s.newRPC()
			}
			for _, cb := range u.merged {
				r.waiters = append(r.waiters, waiter{u.Handle, u.Gen, cb})
			}
			if a.set() {
				r.waiters = append(r.waiters, waiter{u.Handle, u.Gen, a})
			}
		}
		if r != nil {
			r.deadline = time.Now().Add(s.cfg.RPCTimeout)
			s.rpcs[id] = r
		}
	}
	s.mu.Unlock()

	w.buf = append(w.buf[:0], w.left...)
	w.left = w.left[:0]
	var err error
	if len(w.updates) > 0 {
		w.lus, w.lims = w.lus[:0], w.lims[:0]
		w.sl.Updates = w.sl.Updates[:0]
		for _, u := range w.updates {
			w.lims = append(w.lims, pb.Limits{CpuQuotaUs: u.QuotaUs, CpuPeriodUs: u.PeriodUs, MemoryLimitBytes: u.MemLimit})
			w.lus = append(w.lus, pb.LimitUpdate{Handle: u.Handle, Generation: u.Gen})
		}
		for i := range w.lus {
			w.lus[i].Limits = &w.lims[i]
			w.sl.Updates = append(w.sl.Updates, &w.lus[i])
		}
		w.slBody.SetLimits = &w.sl
		w.slEnv = pb.Envelope{RequestId: id, Term: s.term, Body: &w.slBody}
		w.buf, err = wire.AppendEnvelope(w.buf, &w.slEnv)
	}
	for _, v := range w.envs {
		if err != nil {
			break
		}
		v.env.Term = s.term
		w.buf, err = wire.AppendEnvelope(w.buf, v.env)
	}
	return err
}

func (s *Session) observe(w *writer) {
	o := s.cfg.Observer
	if o == nil {
		return
	}
	now := time.Now()
	for i := range w.updates {
		if u := &w.updates[i]; u.Received != 0 {
			o.DecisionSent(time.Duration(now.UnixNano() - u.Received))
		}
	}
	for _, v := range w.envs {
		if !v.received.IsZero() {
			o.VerdictSent(now.Sub(v.received))
		}
	}
}

// Wake sends what is queued. When nobody is writing, the caller (the UDP
// reader, which just decided) writes at once with one non-blocking
// write: no goroutine hand-off, no wait. What the socket does not take
// is left to the writer goroutine, so a daemon that stops reading can
// never stall the caller.
func (s *Session) Wake() {
	if s.raw == nil || !s.wmu.TryLock() {
		s.poke()
		return
	}
	w := &s.w
	if len(w.left) > 0 {
		s.wmu.Unlock()
		s.poke()
		return
	}
	err := s.drain(w)
	if err == nil && len(w.buf) > 0 {
		if w.write == nil {
			w.write = w.rawWrite
		}
		cerr := s.raw.Write(w.write)
		n, werr := w.n, w.werr
		w.werr = nil
		switch {
		case cerr != nil:
			err = cerr
		case werr == unix.EAGAIN || werr == unix.EINTR:
			n = 0
		case werr != nil:
			err = werr
		}
		if err == nil && n < len(w.buf) {
			w.left = append(w.left[:0], w.buf[max(n, 0):]...)
			defer s.poke()
		}
	}
	if err != nil {
		s.wmu.Unlock()
		s.conn.Close()
		return
	}
	s.observe(w)
	s.wmu.Unlock()
}

// writeLoop sends what is queued whenever woken; all envelopes of a round
// go in one blocking write (bounded by WriteTimeout).
func (s *Session) writeLoop() {
	sweep := time.NewTicker(max(s.cfg.RPCTimeout/4, 10*time.Millisecond))
	defer sweep.Stop()
	w := &s.w
	for {
		select {
		case <-s.done:
			return
		case <-sweep.C:
			s.expire(time.Now())
			continue
		case <-s.wake:
		}
		s.wmu.Lock()
		err := s.drain(w)
		if err == nil && len(w.buf) > 0 {
			s.conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
			_, err = s.conn.Write(w.buf)
		}
		if err != nil {
			s.wmu.Unlock()
			s.conn.Close() // reader ends, shutdown fails the callbacks
			return
		}
		s.observe(w)
		s.wmu.Unlock()
	}
}

// newRPC is a SetLimits rpc from the free list, or a new one (s.mu held).
func (s *Session) newRPC() *rpc {
	if n := len(s.rpcFree); n > 0 {
		r := s.rpcFree[n-1]
		s.rpcFree[n-1] = nil
		s.rpcFree = s.rpcFree[:n-1]
		return r
	}
	return &rpc{}
}
