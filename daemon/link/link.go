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
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

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
	// StaleRefused counts envelopes refused for a term below the highest
	// seen (fence.go).
	StaleRefused atomic.Uint64
	// Actions counts controller actions carried out; StaleApplied those
	// whose term was below the highest seen once done (fence.go).
	Actions      atomic.Uint64
	StaleApplied atomic.Uint64
	staleLogged  atomic.Int64 // unix ns of the last refusal logged
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
