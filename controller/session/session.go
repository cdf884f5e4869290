// Package session is the controller's side of the daemon TCP channel
// (docs/protocol.md): the HostHello handshake, the daemon's messages, and
// the controller's RPCs (SetLimits, ReclaimRequest) with request ids,
// timeouts and per-host coalescing of limit updates.
package session

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Handler receives a session's messages. Methods run on the session's
// reader goroutine and must not block for long (they enqueue work).
type Handler interface {
	Hello(s *Session, h *pb.HostHello) (*pb.HelloAck, error)
	Register(s *Session, r *pb.ContainerRegister) error
	Unregister(s *Session, u *pb.ContainerUnregister)
	MemoryUsage(s *Session, m *pb.MemoryUsage)
	OOM(s *Session, requestID uint64, o *pb.OomRequest, received time.Time)
	// BadInput counts a dropped message (reason is a metric label).
	BadInput(s *Session, reason string, err error)
	Closed(s *Session)
}

// Redirect is what a Handler's Hello returns when another controller
// leads: the daemon gets a HelloAck naming the leader instead of a
// session ("" while none is elected).
type Redirect struct{ Leader string }

func (r *Redirect) Error() string {
	if r.Leader == "" {
		return "not the leader, and no leader is elected yet"
	}
	return "not the leader; the leader is at " + r.Leader
}

// LeaseHandler is implemented by a Handler that takes host-local lease
// messages (issue 11); others count them as unexpected.
type LeaseHandler interface {
	LeaseUse(s *Session, u *pb.CpuLeaseUse)
	LeaseReturn(s *Session, r *pb.CpuLeaseReturn)
}

// ImageHandler is implemented by a Handler that keeps each host's image
// store (seed 004 §4.2–4.3 image and layer state).
type ImageHandler interface {
	ImageState(s *Session, st *pb.ImageState)
}

// Observer is told when a decision leaves the controller.
type Observer interface {
	// DecisionSent: telemetry datagram received → set-limits written.
	DecisionSent(d time.Duration)
	// VerdictSent: OOM request read → verdict written.
	VerdictSent(d time.Duration)
}

// Config tunes sessions.
type Config struct {
	RPCTimeout   time.Duration // SetLimits/Reclaim reply deadline
	HelloTimeout time.Duration
	WriteTimeout time.Duration
	// DeadAfter ends a session that sent nothing (daemons send a heartbeat
	// every second) for this long; default 3 s.
	DeadAfter time.Duration
	Observer  Observer
}

// ErrSilent ends a session whose daemon sent nothing for Config.DeadAfter
// (a partition, a stopped or wedged escrad).
var ErrSilent = errors.New("session: daemon silent, declared dead")

// Errors given to RPC callbacks.
var (
	ErrTimeout     = errors.New("session: rpc timed out")
	ErrClosed      = errors.New("session: connection closed")
	ErrNotAcked    = errors.New("session: daemon did not acknowledge the update")
	errNotHelloYet = errors.New("session: first envelope must be HostHello")
)

// Update is one container's new limits. Zero fields stay unchanged.
type Update struct {
	Handle    uint32
	Gen       uint64
	QuotaUs   int64
	PeriodUs  uint32
	MemLimit  int64
	Received  int64             // unix ns of the telemetry that caused it (0: none)
	OnApplied func(err error)   // called once the daemon acked (or failed)
	merged    []func(err error) // callbacks of older, coalesced updates
}

type waiter struct {
	handle uint32
	gen    uint64
	cb     func(error)
}

type rpc struct {
	deadline  time.Time
	waiters   []waiter
	onReclaim func(*pb.ReclaimResult, error)
	onReply   func(*pb.Envelope, error)
}

type verdict struct {
	env      *pb.Envelope
	received time.Time
}

// Session is one daemon connection.
type Session struct {
	ID    uint32
	Hello *pb.HostHello
	Peer  string

	conn net.Conn
	cfg  Config

	mu      sync.Mutex
	pending map[uint32]*Update
	order   []uint32
	envs    []verdict
	rpcs    map[uint64]*rpc
	nextID  uint64
	// Acknowledgements the daemon deferred (SetLimitsAck.Applied.deferred:
	// a docker update carrying a larger limit had not settled) wait here
	// for its late ack (request id 0); lateGen is the newest late-acked
	// generation per handle, for a late ack that overtook the deferral.
	deferred map[uint32][]waiter
	lateGen  map[uint32]uint64
	closed   bool
	wake     chan struct{}
	done     chan struct{}
	lastSeen time.Time

	wmu sync.Mutex
	w   writer
	raw syscall.RawConn // nil when conn is not a socket (tests)
}

// Serve runs one connection until it ends or ctx is done. assignID gives
// the session its id before Handler.Hello is called.
func Serve(ctx context.Context, conn net.Conn, h Handler, cfg Config, id uint32) error {
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 2 * time.Second
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 5 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = 3 * time.Second
	}
	s := &Session{ID: id, Peer: conn.RemoteAddr().String(), conn: conn, cfg: cfg,
		pending: map[uint32]*Update{}, rpcs: map[uint64]*rpc{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if sc, ok := conn.(syscall.Conn); ok {
		s.raw, _ = sc.SyscallConn()
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	r := wire.NewEnvelopeReader(conn)
	w := wire.NewEnvelopeWriter(conn)
	env := &pb.Envelope{}
	conn.SetReadDeadline(time.Now().Add(cfg.HelloTimeout))
	if err := r.Read(env); err != nil {
		h.BadInput(s, "handshake", err)
		return fmt.Errorf("session %s: handshake: %w", s.Peer, err)
	}
	hello := env.GetHello()
	if hello == nil || len(hello.HostId) == 0 || len(hello.HostId) > 256 {
		h.BadInput(s, "handshake", errNotHelloYet)
		conn.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
		w.Write(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_Error{Error: &pb.Error{Message: errNotHelloYet.Error() + " with a host_id"}}})
		return errNotHelloYet
	}
	s.Hello = hello
	ack, err := h.Hello(s, hello)
	if err != nil {
		conn.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
		var rd *Redirect
		if errors.As(err, &rd) {
			w.Write(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_HelloAck{HelloAck: &pb.HelloAck{Leader: rd.Leader}}})
			return err
		}
		w.Write(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_Error{Error: &pb.Error{Message: err.Error()}}})
		return err
	}
	conn.SetReadDeadline(time.Time{})
	conn.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
	if err := w.Write(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_HelloAck{HelloAck: ack}}); err != nil {
		h.Closed(s)
		return err
	}
	go s.writeLoop()
	err = s.readLoop(r, h)
	s.shutdown()
	h.Closed(s)
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (s *Session) readLoop(r *wire.EnvelopeReader, h Handler) error {
	var armed time.Time // when the read deadline was last pushed out
	for {
		env := &pb.Envelope{}
		// The deadline moves at most every DeadAfter/8 (a timer reset per
		// envelope would cost more than it buys); the margin is that much.
		if now := time.Now(); now.Sub(armed) > s.cfg.DeadAfter/8 {
			s.conn.SetReadDeadline(now.Add(s.cfg.DeadAfter))
			armed = now
		}
		if err := r.Read(env); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w (nothing for %v)", ErrSilent, s.cfg.DeadAfter)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				h.BadInput(s, "envelope", err)
			}
			return err
		}
		now := time.Now()
		s.mu.Lock()
		s.lastSeen = now
		s.mu.Unlock()
		switch b := env.Body.(type) {
		case *pb.Envelope_Register:
			if err := h.Register(s, b.Register); err != nil {
				h.BadInput(s, "register", err)
				s.sendEnv(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_Error{Error: &pb.Error{Message: err.Error()}}}, time.Time{})
			}
		case *pb.Envelope_Unregister:
			h.Unregister(s, b.Unregister)
		case *pb.Envelope_MemoryUsage:
			h.MemoryUsage(s, b.MemoryUsage)
		case *pb.Envelope_OomRequest:
			h.OOM(s, env.RequestId, b.OomRequest, now)
		case *pb.Envelope_Heartbeat:
			// Echoed, so the daemon can tell a silent controller too.
			s.sendEnv(&pb.Envelope{Body: &pb.Envelope_Heartbeat{Heartbeat: &pb.Heartbeat{Seq: b.Heartbeat.GetSeq(), SentUnixNs: now.UnixNano()}}}, time.Time{})
		case *pb.Envelope_SetLimitsAck:
			if env.RequestId == 0 {
				s.lateAcked(b.SetLimitsAck)
			} else {
				s.acked(env.RequestId, b.SetLimitsAck)
			}
		case *pb.Envelope_ReclaimResult:
			s.reclaimed(env.RequestId, b.ReclaimResult, nil)
		case *pb.Envelope_CreateContainerResult, *pb.Envelope_RemoveContainersResult, *pb.Envelope_CpuPlacementAnswer:
			s.replied(env.RequestId, env)
		case *pb.Envelope_Error:
			s.failed(env.RequestId, fmt.Errorf("daemon: %s", b.Error.GetMessage()))
		case *pb.Envelope_CpuLeaseUse:
			if lh, ok := h.(LeaseHandler); ok {
				lh.LeaseUse(s, b.CpuLeaseUse)
			} else {
				h.BadInput(s, "unexpected", fmt.Errorf("unexpected %T from daemon", env.Body))
			}
		case *pb.Envelope_CpuLeaseReturn:
			if lh, ok := h.(LeaseHandler); ok {
				lh.LeaseReturn(s, b.CpuLeaseReturn)
			} else {
				h.BadInput(s, "unexpected", fmt.Errorf("unexpected %T from daemon", env.Body))
			}
		case *pb.Envelope_ImageState:
			if ih, ok := h.(ImageHandler); ok {
				ih.ImageState(s, b.ImageState)
			} else {
				h.BadInput(s, "unexpected", fmt.Errorf("unexpected %T from daemon", env.Body))
			}
		default:
			h.BadInput(s, "unexpected", fmt.Errorf("unexpected %T from daemon", env.Body))
		}
	}
}

// TLS is the connection's TLS state; ok is false on a plain connection.
func (s *Session) TLS() (cs tls.ConnectionState, ok bool) {
	if tc, isTLS := s.conn.(*tls.Conn); isTLS {
		return tc.ConnectionState(), true
	}
	return cs, false
}

// LastSeen is when the daemon last sent anything.
func (s *Session) LastSeen() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeen
}

// Push queues an update and wakes the writer.
func (s *Session) Push(u Update) {
	s.Queue(u)
	s.poke()
}

// Queue adds an update without waking the writer. Updates for one handle coalesce: the newest
// generation wins field by field, so a stale update never overwrites a newer one.
func (s *Session) Queue(u Update) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if u.OnApplied != nil {
			u.OnApplied(ErrClosed)
		}
		return
	}
	if prev, ok := s.pending[u.Handle]; ok {
		newer, older := u, *prev
		if newer.Gen < older.Gen {
			newer, older = older, newer
		}
		if newer.QuotaUs == 0 {
			newer.QuotaUs, newer.PeriodUs = older.QuotaUs, older.PeriodUs
		}
		if newer.MemLimit == 0 {
			newer.MemLimit = older.MemLimit
		}
		if newer.Received == 0 || (older.Received != 0 && older.Received < newer.Received) {
			newer.Received = older.Received
		}
		newer.merged = append(append(newer.merged, older.merged...), older.OnApplied)
		if older.OnApplied == nil {
			newer.merged = newer.merged[:len(newer.merged)-1]
		}
		s.pending[u.Handle] = &newer
	} else {
		nu := u
		s.pending[u.Handle] = &nu
		s.order = append(s.order, u.Handle)
	}
	s.mu.Unlock()
}

// Reclaim asks the daemon to reclaim (§IV-C) and calls cb with the result.
func (s *Session) Reclaim(handles []uint32, marginBytes uint64, cb func(*pb.ReclaimResult, error)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cb(nil, ErrClosed)
		return
	}
	s.nextID++
	id := s.nextID
	s.rpcs[id] = &rpc{deadline: time.Now().Add(s.cfg.RPCTimeout), onReclaim: cb}
	s.envs = append(s.envs, verdict{env: &pb.Envelope{RequestId: id, Body: &pb.Envelope_Reclaim{
		Reclaim: &pb.ReclaimRequest{SafeMarginBytes: marginBytes, Handles: handles}}}})
	s.mu.Unlock()
	s.poke()
}

// Call sends one request envelope (the deployer's CreateContainer,
// RemoveContainers) and calls cb with the reply, an Error reply as err, or
// ErrTimeout after timeout. Unlike SetLimits these can take seconds
// (Docker), so the deadline is the caller's.
func (s *Session) Call(env *pb.Envelope, timeout time.Duration, cb func(*pb.Envelope, error)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cb(nil, ErrClosed)
		return
	}
	s.nextID++
	env.RequestId = s.nextID
	s.rpcs[env.RequestId] = &rpc{deadline: time.Now().Add(timeout), onReply: cb}
	s.envs = append(s.envs, verdict{env: env})
	s.mu.Unlock()
	s.poke()
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
	updates []*Update
	lus     []pb.LimitUpdate
	lims    []pb.Limits
	envs    []verdict
}

// drain moves everything queued into w.buf (after any leftover bytes).
// Every update pending for this host goes in one SetLimits envelope.
func (s *Session) drain(w *writer) error {
	s.mu.Lock()
	w.updates = w.updates[:0]
	for _, h := range s.order {
		if u := s.pending[h]; u != nil { // nil after shutdown cleared pending
			w.updates = append(w.updates, u)
		}
	}
	clear(s.pending)
	s.order = s.order[:0]
	w.envs = s.envs
	s.envs = nil
	var id uint64
	if len(w.updates) > 0 {
		s.nextID++
		id = s.nextID
		var ws []waiter
		for _, u := range w.updates {
			for _, cb := range u.merged {
				ws = append(ws, waiter{u.Handle, u.Gen, cb})
			}
			if u.OnApplied != nil {
				ws = append(ws, waiter{u.Handle, u.Gen, u.OnApplied})
			}
		}
		if ws != nil {
			s.rpcs[id] = &rpc{deadline: time.Now().Add(s.cfg.RPCTimeout), waiters: ws}
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
		w.buf, err = wire.AppendEnvelope(w.buf, &pb.Envelope{RequestId: id, Body: &pb.Envelope_SetLimits{SetLimits: &w.sl}})
	}
	for _, v := range w.envs {
		if err != nil {
			break
		}
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
	for _, u := range w.updates {
		if u.Received != 0 {
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
		var n int
		var werr error
		cerr := s.raw.Write(func(fd uintptr) bool {
			n, werr = unix.Write(int(fd), w.buf)
			return true // never wait for the socket to drain
		})
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

func (s *Session) take(id uint64) *rpc {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rpcs[id]
	delete(s.rpcs, id)
	return r
}

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
		w.cb(err)
	}
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
		evicted.cb(ErrNotAcked)
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
		w.cb(nil)
	}
}

func (s *Session) replied(id uint64, env *pb.Envelope) {
	r := s.take(id)
	if r != nil && r.onReply != nil {
		r.onReply(env, nil)
	}
}

func (s *Session) reclaimed(id uint64, res *pb.ReclaimResult, err error) {
	r := s.take(id)
	if r == nil {
		return
	}
	if r.onReclaim != nil {
		r.onReclaim(res, err)
	}
	for _, w := range r.waiters {
		w.cb(ErrNotAcked)
	}
}

func (s *Session) failed(id uint64, err error) {
	r := s.take(id)
	if r == nil {
		return
	}
	if r.onReclaim != nil {
		r.onReclaim(nil, err)
	}
	if r.onReply != nil {
		r.onReply(nil, err)
	}
	for _, w := range r.waiters {
		w.cb(err)
	}
}

func (s *Session) expire(now time.Time) {
	var late []*rpc
	s.mu.Lock()
	for id, r := range s.rpcs {
		if now.After(r.deadline) {
			late = append(late, r)
			delete(s.rpcs, id)
		}
	}
	s.mu.Unlock()
	for _, r := range late {
		if r.onReclaim != nil {
			r.onReclaim(nil, ErrTimeout)
		}
		if r.onReply != nil {
			r.onReply(nil, ErrTimeout)
		}
		for _, w := range r.waiters {
			w.cb(ErrTimeout)
		}
	}
}

func (s *Session) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	rpcs := s.rpcs
	s.rpcs = map[uint64]*rpc{}
	var cbs []func(error)
	for _, u := range s.pending {
		cbs = append(cbs, u.merged...)
		if u.OnApplied != nil {
			cbs = append(cbs, u.OnApplied)
		}
	}
	clear(s.pending)
	s.order = s.order[:0]
	for _, ws := range s.deferred {
		for _, w := range ws {
			cbs = append(cbs, w.cb)
		}
	}
	s.deferred = nil
	s.mu.Unlock()
	for _, r := range rpcs {
		if r.onReclaim != nil {
			r.onReclaim(nil, ErrClosed)
		}
		if r.onReply != nil {
			r.onReply(nil, ErrClosed)
		}
		for _, w := range r.waiters {
			cbs = append(cbs, w.cb)
		}
	}
	for _, cb := range cbs {
		cb(ErrClosed)
	}
}

// Close ends the session.
func (s *Session) Close() error { return s.conn.Close() }
