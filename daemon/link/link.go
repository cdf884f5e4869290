// Package link is escrad's side of the controller protocol (docs/protocol.md):
// one TCP session (hello, registrations, usage snapshots, heartbeats, OOM
// requests; set-limits and reclaim RPCs from the controller) and UDP
// telemetry datagrams. It reconnects with backoff and jitter and
// re-registers everything. While the controller is unreachable nothing is
// changed: limits stay as they are and OOM requests fail at once.
package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// Handler serves the controller's requests and supplies session state.
type Handler interface {
	// SetLimits applies m; recv is when the envelope was decoded.
	SetLimits(recv time.Time, m *escrapb.SetLimits) *escrapb.SetLimitsAck
	Reclaim(m *escrapb.ReclaimRequest) *escrapb.ReclaimResult
	// Registrations lists every managed container (sent after each connect).
	Registrations() []*escrapb.ContainerRegister
	// MemoryUsage is the periodic snapshot for slack accounting.
	MemoryUsage() *escrapb.MemoryUsage
}

// Deployer creates and removes containers for the controller's deployer
// (Escra §IV-A). A Handler that also implements it serves
// CreateContainer and RemoveContainers; others answer with an Error.
// The calls talk to Docker, so they run off the reader goroutine.
type Deployer interface {
	CreateContainer(ctx context.Context, m *escrapb.CreateContainer) (*escrapb.CreateContainerResult, error)
	RemoveContainers(ctx context.Context, m *escrapb.RemoveContainers) (*escrapb.RemoveContainersResult, error)
}

// CPUPlacer is implemented by a Handler that simulates the WYSIWYG paper's host
// CPU allocation for the deployer (CpuPlacementQuery).
type CPUPlacer interface {
	SimulateCPU(q *escrapb.CpuPlacementQuery) *escrapb.CpuPlacementAnswer
}

// LeaseHandler is implemented by a Handler that holds host-local CPU
// lease credit (host-local leases). Lease runs on the reader goroutine and returns
// the answer to a revoke (nil: none); LeasesLost is called when the
// session ends, before another can start: the controller drops its side.
type LeaseHandler interface {
	Lease(m *escrapb.CpuLease) *escrapb.CpuLeaseReturn
	LeasesLost()
}

// ImageReporter is implemented by a Handler that reports its engine's
// image store (dependency-aware scheduling §4.2–4.3); the last state goes after every
// connect, changes through SendImageState.
type ImageReporter interface {
	ImageState() *escrapb.ImageState
}

// SessionObserver is implemented by a Handler that wants to know when a
// session ends (called from the same place as LeasesLost).
type SessionObserver interface {
	SessionEnded()
}

// Config of a link.
type Config struct {
	Addr string // controller TCP address
	// Addrs are several controllers (one leads, docs/operator.md); they
	// are tried in turn and a follower's pointer to the leader is
	// followed. Empty: Addr alone.
	Addrs     []string
	Hello     *escrapb.HostHello
	Heartbeat time.Duration // heartbeat and usage snapshot interval (1 s)
	// DeadAfter ends a session on which the controller, once it has
	// echoed a heartbeat, sent nothing for this long (default 3 s): a
	// stopped or partitioned controller. Pending OOM requests are then
	// released at once instead of waiting for their deadline.
	DeadAfter time.Duration
	Log       *slog.Logger
	// TLS, when set, makes the session mutual TLS (auth.ClientConfig) and
	// every telemetry datagram authenticated with the session's key; nil
	// is plain mode (escrad --insecure, in-process tests).
	TLS *tls.Config
}

// Client is the daemon's controller link.
type Client struct {
	cfg Config
	h   Handler

	mu      sync.Mutex // guards conn, q, out, pending, nextID, sent
	conn    net.Conn
	q       chan []byte // framed envelopes for the session's writer
	out     escrapb.Envelope
	pending map[uint64]func(*escrapb.OomVerdict)
	nextID  uint64
	sent    map[uint32]bool // handles registered on this session

	udp atomic.Pointer[udpSession]
	// Telemetry state, used only by the sampler goroutine.
	batcher wire.Batcher
	pool    []*escrapb.CpuStat
	used    int
	sess    *udpSession

	// maxTerm is the highest leadership term any session announced.
	maxTerm atomic.Uint64
	addr    atomic.Pointer[string] // the session's controller, when up

	Connects  atomic.Uint64
	Datagrams atomic.Uint64
}

type udpSession struct {
	id   uint32
	conn *net.UDPConn
	mac  *wire.DatagramMAC // authenticated mode; used by the sampler only
}

// New returns an unconnected client; Run connects.
func New(cfg Config, h Handler) *Client {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = 3 * time.Second
	}
	if len(cfg.Addrs) == 0 {
		cfg.Addrs = []string{cfg.Addr}
	}
	return &Client{cfg: cfg, h: h, pending: map[uint64]func(*escrapb.OomVerdict){}}
}

// Connected reports whether a session is up.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn != nil
}

// Addr is the controller the session is up with ("" when down).
func (c *Client) Addr() string {
	if p := c.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Term is the highest leadership term seen.
func (c *Client) Term() uint64 { return c.maxTerm.Load() }

// Run keeps a session up until ctx ends. It tries the controllers in
// turn, at once while some are untried, and follows a follower's pointer
// to the leader once per try; after a round that failed it backs off.
func (c *Client) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	i, failed, leader := 0, 0, ""
	for ctx.Err() == nil {
		addr := c.cfg.Addrs[i]
		redirected := leader != ""
		if redirected {
			addr = leader
		}
		up, next, err := c.session(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		leader = ""
		if next != "" && !redirected && next != addr {
			c.cfg.Log.Info("controller is not the leader; following it to the leader", "addr", addr, "leader", next)
			leader = next
			continue
		}
		i = (i + 1) % len(c.cfg.Addrs)
		if up {
			backoff, failed = 100*time.Millisecond, 0
		} else if failed++; failed < len(c.cfg.Addrs) {
			continue // another controller may answer: no wait
		}
		failed = 0
		wait := backoff/2 + rand.N(backoff) // jitter: 0.5–1.5 × backoff
		c.cfg.Log.Warn("controller link down; reconnecting", "addr", addr, "err", err, "in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// Capped at 1 s (0.5–1.5 s with jitter): a restarted controller sees
		// every daemon back within 2 s; one dial a second per host is cheap.
		backoff = min(backoff*2, time.Second)
	}
}

func (c *Client) session(ctx context.Context, addr string) (up bool, leader string, err error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	var conn net.Conn
	if c.cfg.TLS != nil {
		td := tls.Dialer{NetDialer: &d, Config: c.cfg.TLS}
		conn, err = td.DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return false, "", err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()

	w := wire.NewEnvelopeWriter(conn)
	r := wire.NewEnvelopeReader(conn)
	var env escrapb.Envelope
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := w.Write(&escrapb.Envelope{Body: &escrapb.Envelope_Hello{Hello: c.cfg.Hello}}); err != nil {
		return false, "", err
	}
	if err := r.Read(&env); err != nil {
		return false, "", fmt.Errorf("waiting for hello ack: %w", err)
	}
	ack := env.GetHelloAck()
	if ack != nil && ack.SessionId == 0 {
		if ack.Leader == "" {
			return false, "", errors.New("controller is not the leader, and none is elected yet")
		}
		return false, ack.Leader, fmt.Errorf("controller is not the leader (the leader is at %s)", ack.Leader)
	}
	if ack == nil {
		if e := env.GetError(); e != nil {
			return false, "", fmt.Errorf("controller refused hello: %s", e.Message)
		}
		return false, "", errors.New("controller answered hello without a session")
	}
	// Terms only grow: a lower one is a deposed leader that has not
	// noticed yet; its limits are not applied.
	term := ack.Term
	if seen := c.maxTerm.Load(); term < seen {
		return false, "", fmt.Errorf("controller is at term %d, below the term %d already seen: a deposed leader", term, seen)
	}
	c.maxTerm.Store(term)
	conn.SetDeadline(time.Time{})
	us, err := dialTelemetry(ack.TelemetryAddr, conn.RemoteAddr())
	if err != nil {
		return false, "", err
	}
	defer us.conn.Close()
	us.id = ack.SessionId
	if tc, ok := conn.(*tls.Conn); ok {
		key, err := auth.TelemetryKey(tc.ConnectionState(), us.id)
		if err != nil {
			return false, "", err
		}
		us.mac = wire.NewDatagramMAC(key)
	}
	c.udp.Store(us)
	defer c.udp.CompareAndSwap(us, nil)

	// Every envelope after the handshake goes through one queue and one
	// writer goroutine: a caller (the sampler raising a quota from lease
	// credit, the reader answering set-limits) never waits on the socket,
	// and the wire order is the order of the calls.
	q := make(chan []byte, sendQueueLen)
	wdone := make(chan struct{})
	defer close(wdone)
	go c.writer(conn, q, wdone)

	// Registering everything happens under c.mu, so a container the agent
	// adds meanwhile is registered exactly once on this session.
	c.mu.Lock()
	c.conn, c.q, c.sent = conn, q, map[uint32]bool{}
	for _, reg := range c.h.Registrations() {
		if err := c.sendLocked(0, &escrapb.Envelope_Register{Register: reg}); err != nil {
			c.mu.Unlock()
			c.drop()
			return true, "", err
		}
		c.sent[reg.Handle] = true
	}
	if ir, ok := c.h.(ImageReporter); ok {
		if st := ir.ImageState(); st != nil {
			if err := c.sendLocked(0, &escrapb.Envelope_ImageState{ImageState: st}); err != nil {
				c.mu.Unlock()
				c.drop()
				return true, "", err
			}
		}
	}
	c.mu.Unlock()
	defer c.drop()
	c.Connects.Add(1)
	c.addr.Store(&addr)
	defer c.addr.Store(nil)
	c.cfg.Log.Info("controller session up", "addr", addr, "session", ack.SessionId, "term", term, "telemetry", us.conn.RemoteAddr().String())

	hbDone := make(chan struct{})
	defer close(hbDone)
	go c.heartbeats(hbDone)

	// A controller that echoes heartbeats is held to them; one that never
	// did (an older controller) is not.
	echoes := false
	var armed time.Time
	for {
		if now := time.Now(); echoes && now.Sub(armed) > c.cfg.DeadAfter/8 {
			conn.SetReadDeadline(now.Add(c.cfg.DeadAfter))
			armed = now
		}
		if err := r.Read(&env); err != nil {
			if errors.Is(err, io.EOF) {
				return true, "", errors.New("controller closed the session")
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return true, "", fmt.Errorf("controller silent for %v: session declared dead", c.cfg.DeadAfter)
			}
			return true, "", err
		}
		recv := time.Now()
		switch b := env.Body.(type) {
		case *escrapb.Envelope_SetLimits:
			var ack *escrapb.SetLimitsAck
			if seen := c.maxTerm.Load(); term < seen {
				ack = staleTerm(b.SetLimits, term, seen)
			} else {
				ack = c.h.SetLimits(recv, b.SetLimits)
			}
			err = c.send(env.RequestId, &escrapb.Envelope_SetLimitsAck{SetLimitsAck: ack})
		case *escrapb.Envelope_Reclaim:
			res := c.h.Reclaim(b.Reclaim)
			err = c.send(env.RequestId, &escrapb.Envelope_ReclaimResult{ReclaimResult: res})
		case *escrapb.Envelope_CreateContainer:
			c.deploy(ctx, env.RequestId, b.CreateContainer, nil)
		case *escrapb.Envelope_RemoveContainers:
			c.deploy(ctx, env.RequestId, nil, b.RemoveContainers)
		case *escrapb.Envelope_OomVerdict:
			c.mu.Lock()
			cb := c.pending[env.RequestId]
			delete(c.pending, env.RequestId)
			c.mu.Unlock()
			if cb != nil {
				cb(b.OomVerdict)
			}
		case *escrapb.Envelope_CpuLease:
			if lh, ok := c.h.(LeaseHandler); ok {
				if ret := lh.Lease(b.CpuLease); ret != nil {
					err = c.send(0, &escrapb.Envelope_CpuLeaseReturn{CpuLeaseReturn: ret})
				}
			}
		case *escrapb.Envelope_CpuPlacementQuery:
			ans := &escrapb.CpuPlacementAnswer{Refused: "this daemon does not place CPUs"}
			if cp, ok := c.h.(CPUPlacer); ok {
				ans = cp.SimulateCPU(b.CpuPlacementQuery)
			}
			err = c.send(env.RequestId, &escrapb.Envelope_CpuPlacementAnswer{CpuPlacementAnswer: ans})
		case *escrapb.Envelope_Error:
			c.cfg.Log.Warn("controller error", "request", env.RequestId, "msg", b.Error.Message)
		case *escrapb.Envelope_Heartbeat:
			echoes = true
		default:
			c.cfg.Log.Debug("unexpected envelope from controller", "type", fmt.Sprintf("%T", b))
		}
		if err != nil {
			return true, "", err
		}
	}
}

// staleTerm refuses every update of m: its session's term is below one
// seen since.
func staleTerm(m *escrapb.SetLimits, term, seen uint64) *escrapb.SetLimitsAck {
	ack := &escrapb.SetLimitsAck{Applied: make([]*escrapb.SetLimitsAck_Applied, len(m.Updates))}
	msg := fmt.Sprintf("stale term %d: term %d seen", term, seen)
	for i, u := range m.Updates {
		ack.Applied[i] = &escrapb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, Error: msg}
	}
	return ack
}

// deploy serves one create or remove request in its own goroutine (Docker
// calls take seconds; set-limits must not wait behind them).
func (c *Client) deploy(ctx context.Context, id uint64, cr *escrapb.CreateContainer, rm *escrapb.RemoveContainers) {
	d, ok := c.h.(Deployer)
	if !ok {
		_ = c.send(id, &escrapb.Envelope_Error{Error: &escrapb.Error{Message: "this daemon cannot create containers (no Docker engine)"}})
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		var body any
		if cr != nil {
			res, err := d.CreateContainer(ctx, cr)
			body = &escrapb.Envelope_CreateContainerResult{CreateContainerResult: res}
			if err != nil {
				body = &escrapb.Envelope_Error{Error: &escrapb.Error{Message: err.Error()}}
			}
		} else {
			res, err := d.RemoveContainers(ctx, rm)
			body = &escrapb.Envelope_RemoveContainersResult{RemoveContainersResult: res}
			if err != nil {
				body = &escrapb.Envelope_Error{Error: &escrapb.Error{Message: err.Error()}}
			}
		}
		if err := c.send(id, body); err != nil {
			c.cfg.Log.Warn("deploy reply not sent", "request", id, "err", err)
		}
	}()
}

func dialTelemetry(addr string, tcpPeer net.Addr) (*udpSession, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("bad telemetry address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if ta, ok := tcpPeer.(*net.TCPAddr); ok {
			host = ta.IP.String()
		}
	}
	ua, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	uc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		return nil, err
	}
	return &udpSession{conn: uc}, nil
}

// drop ends the session state; pending OOM requests get a nil verdict.
func (c *Client) drop() {
	c.mu.Lock()
	c.conn, c.q, c.sent = nil, nil, nil
	p := c.pending
	c.pending = map[uint64]func(*escrapb.OomVerdict){}
	c.mu.Unlock()
	if lh, ok := c.h.(LeaseHandler); ok {
		lh.LeasesLost()
	}
	if so, ok := c.h.(SessionObserver); ok {
		so.SessionEnded()
	}
	for _, cb := range p {
		cb(nil)
	}
}

func (c *Client) heartbeats(done chan struct{}) {
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		seq++
		_ = c.send(0, &escrapb.Envelope_Heartbeat{Heartbeat: &escrapb.Heartbeat{Seq: seq, SentUnixNs: time.Now().UnixNano()}})
		if mu := c.h.MemoryUsage(); mu != nil && len(mu.Samples) > 0 {
			_ = c.send(0, &escrapb.Envelope_MemoryUsage{MemoryUsage: mu})
		}
	}
}

var errDown = errors.New("link: controller not connected")

// send writes one envelope; bodies are escrapb.Envelope_* wrappers.
func (c *Client) send(reqID uint64, b any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendLocked(reqID, b)
}

func (c *Client) sendLocked(reqID uint64, b any) error {
	if c.conn == nil {
		return errDown
	}
	c.out.RequestId = reqID
	switch v := b.(type) {
	case *escrapb.Envelope_Register:
		c.out.Body = v
	case *escrapb.Envelope_Unregister:
		c.out.Body = v
	case *escrapb.Envelope_MemoryUsage:
		c.out.Body = v
	case *escrapb.Envelope_OomRequest:
		c.out.Body = v
	case *escrapb.Envelope_SetLimitsAck:
		c.out.Body = v
	case *escrapb.Envelope_ReclaimResult:
		c.out.Body = v
	case *escrapb.Envelope_Heartbeat:
		c.out.Body = v
	case *escrapb.Envelope_CreateContainerResult:
		c.out.Body = v
	case *escrapb.Envelope_RemoveContainersResult:
		c.out.Body = v
	case *escrapb.Envelope_Error:
		c.out.Body = v
	case *escrapb.Envelope_CpuLeaseUse:
		c.out.Body = v
	case *escrapb.Envelope_CpuLeaseReturn:
		c.out.Body = v
	case *escrapb.Envelope_CpuPlacementAnswer:
		c.out.Body = v
	case *escrapb.Envelope_ImageState:
		c.out.Body = v
	default:
		return fmt.Errorf("link: cannot send %T", b)
	}
	// Marshalled now: the caller may reuse its message once we return.
	frame, err := wire.AppendEnvelope(nil, &c.out)
	c.out.Body = nil
	if err != nil {
		return err
	}
	select {
	case c.q <- frame:
		return nil
	default:
		// The controller has not read sendQueueLen envelopes: the session
		// is as good as dead. The reader sees the close and reconnects.
		c.conn.Close()
		return errQueueFull
	}
}

// sendQueueLen bounds the envelopes waiting for the socket: a host's
// registrations at connect (up to a few thousand containers) fit.
const sendQueueLen = 8192

var errQueueFull = errors.New("link: controller not reading: send queue full, session closed")

// writer writes the session's queued frames in order, several per write
// when they are waiting, until the session ends or a write fails.
func (c *Client) writer(conn net.Conn, q <-chan []byte, done <-chan struct{}) {
	var buf []byte
	for {
		select {
		case <-done:
			return
		case f := <-q:
			buf = append(buf[:0], f...)
		}
	drain:
		for len(buf) < 64<<10 {
			select {
			case f := <-q:
				buf = append(buf, f...)
			default:
				break drain
			}
		}
		conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(buf); err != nil {
			conn.Close() // the reader sees the error and reconnects
			return
		}
	}
}

// LeaseUse reports a quota raise from lease credit. It is queued at once,
// without waiting on the socket, so it precedes on the wire any return the
// caller's lock orders after it (docs/protocol.md).
func (c *Client) LeaseUse(u *escrapb.CpuLeaseUse) error {
	return c.send(0, &escrapb.Envelope_CpuLeaseUse{CpuLeaseUse: u})
}

// LateAck confirms acknowledgements SetLimits deferred (request id 0,
// see SetLimitsAck.Applied.deferred). Dropped when down: the session that
// was owed them ended, and its controller counts those limits as held.
func (c *Client) LateAck(a *escrapb.SetLimitsAck) error {
	return c.send(0, &escrapb.Envelope_SetLimitsAck{SetLimitsAck: a})
}

// Register announces a container (dropped when down: sent again on connect).
func (c *Client) Register(r *escrapb.ContainerRegister) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || c.sent[r.Handle] {
		return nil
	}
	err := c.sendLocked(0, &escrapb.Envelope_Register{Register: r})
	if err == nil {
		c.sent[r.Handle] = true
	}
	return err
}

// SendImageState sends the engine's image store; while down it is
// dropped (the reporter's state goes with the next connect).
func (c *Client) SendImageState(st *escrapb.ImageState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	return c.sendLocked(0, &escrapb.Envelope_ImageState{ImageState: st})
}

// Unregister announces a container's end.
func (c *Client) Unregister(u *escrapb.ContainerUnregister) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil || !c.sent[u.Handle] {
		return nil
	}
	delete(c.sent, u.Handle)
	return c.sendLocked(0, &escrapb.Envelope_Unregister{Unregister: u})
}

// RequestOOM sends an OOM request; cb gets the verdict, or nil when the
// session drops first. It returns the request id (for Cancel) or an error
// at once when no session is up.
func (c *Client) RequestOOM(req *escrapb.OomRequest, cb func(*escrapb.OomVerdict)) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return 0, errDown
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cb
	if err := c.sendLocked(id, &escrapb.Envelope_OomRequest{OomRequest: req}); err != nil {
		delete(c.pending, id)
		return 0, err
	}
	return id, nil
}

// Cancel forgets a pending OOM request (its deadline passed).
func (c *Client) Cancel(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// CPU queues one telemetry record (copied; s is reused by the caller).
// Only the sampler goroutine calls CPU and Flush.
func (c *Client) CPU(s *escrapb.CpuStat) {
	us := c.udp.Load()
	if us == nil {
		return // no session: telemetry is dropped, nothing else changes
	}
	if us != c.sess {
		c.sess = us
		c.batcher = wire.Batcher{SessionID: us.id, PeriodUs: c.batcher.PeriodUs, MAC: us.mac}
		c.used = 0
	}
	if c.used == len(c.pool) {
		c.pool = append(c.pool, &escrapb.CpuStat{})
	}
	d := c.pool[c.used]
	c.used++
	d.Handle, d.PeriodSeq, d.QuotaUs, d.PeriodUs = s.Handle, s.PeriodSeq, s.QuotaUs, s.PeriodUs
	d.UnusedUs, d.Throttled, d.NrThrottled = s.UnusedUs, s.Throttled, s.NrThrottled
	d.ThrottledUs, d.UsageUs, d.MidPeriod = s.ThrottledUs, s.UsageUs, s.MidPeriod
	_ = c.batcher.Add(d, c.emit)
}

// Flush sends the period's last datagram.
func (c *Client) Flush() {
	if c.sess != nil {
		_ = c.batcher.Flush(c.emit)
	}
	c.used = 0
}

func (c *Client) emit(b []byte) error {
	if c.sess == nil {
		return errDown
	}
	_, err := c.sess.conn.Write(b)
	if err == nil {
		c.Datagrams.Add(1)
	}
	return nil // a lost datagram is a gap in period_seq, by design
}

// SetPeriod sets the default period stamped on telemetry batches.
func (c *Client) SetPeriod(periodUs uint32) { c.batcher.PeriodUs = periodUs }
