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
	"sync"
	"syscall"
	"time"

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

// LeaseHandler is implemented by a Handler that takes the host-local CPU
// lease messages (docs/host-credit.md); others count them as unexpected.
type LeaseHandler interface {
	LeaseUse(s *Session, u *pb.CpuLeaseUse)
	LeaseReturn(s *Session, r *pb.CpuLeaseReturn)
}

// ImageHandler is implemented by a Handler that keeps each host's image
// store (Dependency Scheduling §4.2–4.3: image and layer state).
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
	// MsgRate and MsgBurst pace the daemon's messages (pace.go; 0: none).
	MsgRate  float64
	MsgBurst int
	// MayAct, when set, is asked before every write round: false (the
	// leader's lease is past its deadline) closes the session with nothing
	// of the round sent.
	MayAct func() bool
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
	// ErrNotLeading ends a session whose controller's lease ran out.
	ErrNotLeading = errors.New("session: leadership lease past its deadline; nothing more sent")
)

// Session is one daemon connection.
type Session struct {
	ID    uint32
	Hello *pb.HostHello
	Peer  string
	// term is the leadership term the session was opened in (HelloAck);
	// every envelope the controller sends on it carries it, so a daemon
	// that has seen a newer leader refuses what this one still sends.
	term uint64

	conn net.Conn
	cfg  Config

	mu      sync.Mutex
	pending map[uint32]int // handle -> its update in queue
	queue   []Update       // in the order their handles were first queued
	rpcFree []*rpc         // answered SetLimits rpcs, for reuse
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
		pending: map[uint32]int{}, rpcs: map[uint64]*rpc{},
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
	s.term = ack.GetTerm()
	conn.SetReadDeadline(time.Time{})
	conn.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
	if err := w.Write(&pb.Envelope{RequestId: env.RequestId, Term: s.term, Body: &pb.Envelope_HelloAck{HelloAck: ack}}); err != nil {
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
	var cbs []ackTo
	for _, u := range s.queue {
		cbs = append(cbs, u.merged...)
		if a := u.ackTo(); a.set() {
			cbs = append(cbs, a)
		}
	}
	clear(s.pending)
	s.queue = s.queue[:0]
	for _, ws := range s.deferred {
		for _, w := range ws {
			cbs = append(cbs, w.cb)
		}
	}
	s.deferred = nil
	s.mu.Unlock()
	for _, r := range rpcs {
		r.failReply(ErrClosed)
		for _, w := range r.waiters {
			cbs = append(cbs, w.cb)
		}
	}
	for _, cb := range cbs {
		cb.call(ErrClosed)
	}
}

// Close ends the session.
func (s *Session) Close() error { return s.conn.Close() }
