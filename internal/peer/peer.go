// Package peer is a scripted controller for escrad's tests and benchmark:
// it speaks the real wire protocol (docs/protocol.md) on loopback, records
// registrations and telemetry, answers OOM requests with a scripted
// verdict, and sends SetLimits/Reclaim RPCs on demand. The acceptance tests
// use the real controller when it is built; this peer lets the daemon's own
// packages be tested alone.
package peer

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Peer is one scripted controller.
type Peer struct {
	ln  net.Listener
	udp *net.UDPConn

	// OnOOM decides a verdict (nil: deny). It runs on the session reader.
	OnOOM func(req *pb.OomRequest) *pb.OomVerdict

	mu       sync.Mutex
	cond     *sync.Cond
	sess     *session
	regs     map[string]*pb.ContainerRegister // by container id
	unregs   map[string]bool
	ooms     []*pb.OomRequest
	sessions int

	Batches atomic.Uint64
	Stats   atomic.Uint64
	lastCPU sync.Map // handle -> *pb.CpuStat
	// MidPeriod counts throttle events received.
	MidPeriod atomic.Uint64
	// Backend is the last session's HostHello.backend.
	Backend atomic.Int32
	cpuHook atomic.Pointer[func(*pb.CpuStat)]

	leaseUses    []*pb.CpuLeaseUse
	leaseReturns []*pb.CpuLeaseReturn
	memUses      []*pb.MemCreditUse
	memReturns   []*pb.MemCreditReturn

	images       *pb.ImageState
	imageReports int
}

// Images is the last image state the daemon reported and how many
// reports came.
func (p *Peer) Images() (*pb.ImageState, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.images, p.imageReports
}

type session struct {
	conn    net.Conn
	wmu     sync.Mutex
	w       *wire.EnvelopeWriter
	nextID  uint64
	waiters map[uint64]chan *pb.Envelope
}

// Start listens on 127.0.0.1 (TCP and UDP, ephemeral ports).
func Start() (*Peer, error) { return StartAt("127.0.0.1:0") }

// StartAt listens for daemons on addr (a loopback address).
func StartAt(addr string) (*Peer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &Peer{ln: ln, udp: udp, regs: map[string]*pb.ContainerRegister{}, unregs: map[string]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	go p.readUDP()
	return p, nil
}

// Addr is the TCP address to give escrad.
func (p *Peer) Addr() string { return p.ln.Addr().String() }

// Close stops listening and drops the session.
func (p *Peer) Close() {
	p.ln.Close()
	p.udp.Close()
	p.mu.Lock()
	if p.sess != nil {
		p.sess.conn.Close()
	}
	p.mu.Unlock()
}

func (p *Peer) readUDP() {
	buf := make([]byte, 2048)
	var b pb.TelemetryBatch
	for {
		n, err := p.udp.Read(buf)
		if err != nil {
			return
		}
		if wire.DecodeBatch(buf[:n], &b) != nil {
			continue
		}
		p.Batches.Add(1)
		p.Stats.Add(uint64(len(b.Stats)))
		for _, s := range b.Stats {
			if s.MidPeriod {
				p.MidPeriod.Add(1)
			}
			p.lastCPU.Store(s.Handle, s)
			if f := p.cpuHook.Load(); f != nil {
				(*f)(s)
			}
		}
	}
}

// OnCPU makes f see every telemetry record as it arrives, on the UDP
// reader (benchmarks time throttle events by it); nil: none.
func (p *Peer) OnCPU(f func(*pb.CpuStat)) {
	if f == nil {
		p.cpuHook.Store(nil)
		return
	}
	p.cpuHook.Store(&f)
}

// LastCPU is the newest telemetry record for handle h.
func (p *Peer) LastCPU(h uint32) *pb.CpuStat {
	v, ok := p.lastCPU.Load(h)
	if !ok {
		return nil
	}
	return v.(*pb.CpuStat)
}

func (p *Peer) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Peer) serve(c net.Conn) {
	defer c.Close()
	r := wire.NewEnvelopeReader(c)
	s := &session{conn: c, w: wire.NewEnvelopeWriter(c), waiters: map[uint64]chan *pb.Envelope{}}
	var env pb.Envelope
	if r.Read(&env) != nil || env.GetHello() == nil {
		return
	}
	p.Backend.Store(int32(env.GetHello().Backend))
	p.mu.Lock()
	p.sessions++
	sid := uint32(p.sessions)
	p.mu.Unlock()
	if s.write(&pb.Envelope{Body: &pb.Envelope_HelloAck{HelloAck: &pb.HelloAck{SessionId: sid, PeriodUs: 100000, TelemetryAddr: p.udp.LocalAddr().String()}}}) != nil {
		return
	}
	p.mu.Lock()
	p.sess = s
	p.cond.Broadcast()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if p.sess == s {
			p.sess = nil
		}
		p.mu.Unlock()
	}()
	for {
		env := &pb.Envelope{}
		if r.Read(env) != nil {
			return
		}
		switch b := env.Body.(type) {
		case *pb.Envelope_Register:
			p.mu.Lock()
			p.regs[b.Register.ContainerId] = b.Register
			delete(p.unregs, b.Register.ContainerId)
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_Unregister:
			p.mu.Lock()
			if r := p.regs[b.Unregister.ContainerId]; r != nil && r.Handle == b.Unregister.Handle {
				delete(p.regs, b.Unregister.ContainerId)
			}
			p.unregs[b.Unregister.ContainerId] = true
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_OomRequest:
			p.mu.Lock()
			p.ooms = append(p.ooms, b.OomRequest)
			f := p.OnOOM
			p.cond.Broadcast()
			p.mu.Unlock()
			v := &pb.OomVerdict{Handle: b.OomRequest.Handle}
			if f != nil {
				if x := f(b.OomRequest); x != nil {
					v = x
				} else {
					continue // scripted silence: no verdict at all
				}
			}
			_ = s.write(&pb.Envelope{RequestId: env.RequestId, Body: &pb.Envelope_OomVerdict{OomVerdict: v}})
		case *pb.Envelope_CpuLeaseUse:
			p.mu.Lock()
			p.leaseUses = append(p.leaseUses, b.CpuLeaseUse)
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_CpuLeaseReturn:
			p.mu.Lock()
			p.leaseReturns = append(p.leaseReturns, b.CpuLeaseReturn)
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_MemCreditUse:
			p.mu.Lock()
			p.memUses = append(p.memUses, b.MemCreditUse)
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_MemCreditReturn:
			p.mu.Lock()
			p.memReturns = append(p.memReturns, b.MemCreditReturn)
			p.cond.Broadcast()
			p.mu.Unlock()
		case *pb.Envelope_ImageState:
			p.mu.Lock()
			p.images = b.ImageState
			p.imageReports++
			p.mu.Unlock()
		case *pb.Envelope_SetLimitsAck, *pb.Envelope_ReclaimResult, *pb.Envelope_Error, *pb.Envelope_CpuPlacementAnswer:
			s.wmu.Lock()
			ch := s.waiters[env.RequestId]
			delete(s.waiters, env.RequestId)
			s.wmu.Unlock()
			if ch != nil {
				ch <- env
			}
		}
	}
}

func (s *session) write(env *pb.Envelope) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.w.Write(env)
}

// Registered returns the registration of a container id, if any.
func (p *Peer) Registered(id string) *pb.ContainerRegister {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.regs[id]
}

// Unregistered reports whether the daemon unregistered id.
func (p *Peer) Unregistered(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unregs[id]
}

// OOMRequests returns how many OOM requests arrived.
func (p *Peer) OOMRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ooms)
}

// Sessions counts sessions opened so far.
func (p *Peer) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions
}

// WaitRegistered waits until id is registered or timeout passes.
func (p *Peer) WaitRegistered(id string, timeout time.Duration) *pb.ContainerRegister {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if r := p.Registered(id); r != nil {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

var errNoSession = errors.New("peer: no daemon session")

// Lease sends a CpuLease (a host-local lease).
func (p *Peer) Lease(l *pb.CpuLease) error {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s == nil {
		return errNoSession
	}
	return s.write(&pb.Envelope{Body: &pb.Envelope_CpuLease{CpuLease: l}})
}

// LeaseMessages returns the CpuLeaseUse and CpuLeaseReturn messages
// received so far.
func (p *Peer) LeaseMessages() ([]*pb.CpuLeaseUse, []*pb.CpuLeaseReturn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pb.CpuLeaseUse(nil), p.leaseUses...), append([]*pb.CpuLeaseReturn(nil), p.leaseReturns...)
}

// Kick closes the current daemon session (the daemon reconnects).
func (p *Peer) Kick() {
	p.mu.Lock()
	if p.sess != nil {
		p.sess.conn.Close()
	}
	p.mu.Unlock()
}

// call sends one request and waits for the reply with the same id.
func (p *Peer) call(ctx context.Context, body func(*pb.Envelope)) (*pb.Envelope, error) {
	p.mu.Lock()
	s := p.sess
	p.mu.Unlock()
	if s == nil {
		return nil, errNoSession
	}
	ch := make(chan *pb.Envelope, 1)
	env := &pb.Envelope{}
	body(env)
	s.wmu.Lock()
	s.nextID++
	env.RequestId = s.nextID
	s.waiters[env.RequestId] = ch
	err := s.w.Write(env)
	s.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SetLimits sends one SetLimits and returns the ack.
func (p *Peer) SetLimits(ctx context.Context, updates ...*pb.LimitUpdate) (*pb.SetLimitsAck, error) {
	r, err := p.call(ctx, func(e *pb.Envelope) {
		e.Body = &pb.Envelope_SetLimits{SetLimits: &pb.SetLimits{Updates: updates}}
	})
	if err != nil {
		return nil, err
	}
	if a := r.GetSetLimitsAck(); a != nil {
		return a, nil
	}
	return nil, errors.New("peer: set-limits answered without an ack")
}

// Reclaim sends one ReclaimRequest and returns the result.
func (p *Peer) Reclaim(ctx context.Context, margin uint64, handles ...uint32) (*pb.ReclaimResult, error) {
	r, err := p.call(ctx, func(e *pb.Envelope) {
		e.Body = &pb.Envelope_Reclaim{Reclaim: &pb.ReclaimRequest{SafeMarginBytes: margin, Handles: handles}}
	})
	if err != nil {
		return nil, err
	}
	if a := r.GetReclaimResult(); a != nil {
		return a, nil
	}
	return nil, errors.New("peer: reclaim answered without a result")
}

// SimulateCPU sends one CpuPlacementQuery and returns the answer.
func (p *Peer) SimulateCPU(ctx context.Context, q *pb.CpuPlacementQuery) (*pb.CpuPlacementAnswer, error) {
	r, err := p.call(ctx, func(e *pb.Envelope) {
		e.Body = &pb.Envelope_CpuPlacementQuery{CpuPlacementQuery: q}
	})
	if err != nil {
		return nil, err
	}
	if a := r.GetCpuPlacementAnswer(); a != nil {
		return a, nil
	}
	return nil, errors.New("peer: cpu placement query answered without an answer")
}
