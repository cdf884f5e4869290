// Package rescue is the OOM episode of escrad (Escra §III
// "OOM-preventing kernel event", §IV-B), in one walk: a backend feeds an
// Event (source.Sink.OOM), the Rescuer asks the controller (Link), raises
// the limit on a grant (Limits), and resolves the event on the backend
// (Resolver) one way or the other within the deadline. Groups left under
// OOM are rechecked, and a watchdog lets the stock-kernel trap re-arm.
package rescue

import (
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/limits"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Link is the controller session's OOM side (link.Client).
type Link interface {
	// RequestOOM sends req; verdict gets the answer, or nil when the
	// session drops first. It returns the id to Cancel.
	RequestOOM(req *pb.OomRequest, verdict func(*pb.OomVerdict)) (uint64, error)
	// Connected reports whether a controller session is up.
	Connected() bool
}

// Limits is the limit applier's grant write (limits.Applier).
type Limits interface {
	// RaiseMemory sets h's memory limit to limit if higher; it returns
	// the limit in place afterwards.
	RaiseMemory(h uint32, limit int64) (int64, error)
}

// Resolver is the backend's end of an episode (source.Source).
type Resolver interface {
	Resolve(ev Event, granted bool, newLimit int64) error
}

// Maintainer is a backend whose released traps are set again from the
// watchdog (source.LimitFollower).
type Maintainer interface {
	Maintain(h uint32)
}

// Memory is a container's limits as the applier holds them
// (limits.Entry): the limit in place and when its last write was issued.
type Memory interface {
	Current() (limits.Current, uint64)
	MemoryWriteIssued() time.Time
}

// Metrics are the rescue's Prometheus series (registered by the agent).
type Metrics struct {
	Rescue  prometheus.Histogram   // escrad_oom_rescue_seconds
	Events  prometheus.Counter     // escrad_oom_events_total
	Outcome *prometheus.CounterVec // escrad_oom_outcomes_total{outcome}
	// LateGrants: grants that came after the episode was resolved (the
	// controller's verdict after the deadline, or escra.ko's wait over
	// before the reply); escrad_oom_late_grants_total. Nil: not counted.
	LateGrants prometheus.Counter
	// Via counts rescues by who answered: credit (host-local memory
	// credit, no round trip), controller, outage (raised to the user's
	// own limit); escrad_oom_rescues_total{via}. Nil: not counted.
	Via *prometheus.CounterVec
}

// Credit answers an OOM from host-local memory credit (the agent's
// books, docs/daemon.md) before the controller is asked.
type Credit interface {
	// Grant raises c's limit from credit for ev, reports the use to the
	// controller without waiting, and returns the limit in place; false:
	// no credit covers it (the request goes to the controller).
	Grant(c *Container, ev Event) (int64, bool)
}

// ErrLate is a backend's answer to a reply the kernel no longer waits for
// (escra.ko's oom_timeout_ms passed first).
var ErrLate = errors.New("the kernel stopped waiting for this verdict")

// late counts and logs a grant that came too late to save the tasks that
// asked (their limit may be raised, but the kernel already acted).
func (r *Rescuer) late(m *Container, what string, limit int64) {
	if r.cfg.Metrics.LateGrants != nil {
		r.cfg.Metrics.LateGrants.Inc()
	}
	r.log.Warn("late OOM grant: "+what, "name", m.Name, "limit", limit, "deadline", r.cfg.Deadline)
}

// Config configures a Rescuer.
type Config struct {
	// Deadline is how long a verdict may take; then the limit in place
	// decides (raised: granted, else the kernel acts).
	Deadline time.Duration
	// StockOOM: OOMs are trapped from user space (cgroupfs and bpf
	// backends: v1 eventfd, v2 memory.high brake); escra.ko holds the
	// charge in the kernel instead.
	StockOOM bool
	// OnRescue, when set, sees every rescue: OOM wake-up to the raising
	// write issued and to the write returned.
	OnRescue func(issued, returned time.Duration)
	Log      *slog.Logger
	Metrics  Metrics
	// Credit, when set, may answer an OOM before the controller is asked.
	Credit Credit
}

// Container is one managed container's episode state.
type Container struct {
	H    uint32
	Name string
	App  string // for the rescue's log line
	G    *cgroups.Group
	Mem  Memory
	// Armed: telemetry and the OOM trap are set up (the agent sets it).
	Armed atomic.Bool
	// Ceiling is the memory limit the user set (Docker's
	// HostConfig.Memory, or the group's limit when escrad took it over;
	// cgroups.Max: none). Without a controller an OOM below it is raised
	// to it (see outage.go).
	Ceiling int64

	pending atomic.Bool // an OOM request is out
	again   atomic.Bool // an OOM event came while one was pending

	mu      sync.Mutex
	at      time.Time // wake-up of the pending OOM
	limit   int64     // limit it hit
	rescued bool      // limit raised since
}

// Pending reports whether an OOM request of c is out.
func (c *Container) Pending() bool { return c.pending.Load() }

// Rescuer runs the OOM episodes of every managed container.
type Rescuer struct {
	cfg  Config
	link Link
	lim  Limits
	src  Resolver
	log  *slog.Logger

	mu  sync.Mutex
	byH map[uint32]*Container

	beat atomic.Int64 // unix ns of the watchdog's last round
}

// New builds a Rescuer over the controller link, the limit applier and
// the backend.
func New(cfg Config, link Link, lim Limits, src Resolver) *Rescuer {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Rescuer{cfg: cfg, link: link, lim: lim, src: src, log: cfg.Log, byH: map[uint32]*Container{}}
}

// Add makes c's events count (before its group is watched).
func (r *Rescuer) Add(c *Container) {
	r.mu.Lock()
	r.byH[c.H] = c
	r.mu.Unlock()
}

// Remove forgets h's container.
func (r *Rescuer) Remove(h uint32) {
	r.mu.Lock()
	delete(r.byH, h)
	r.mu.Unlock()
}

func (r *Rescuer) get(h uint32) *Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byH[h]
}

// list is every container by handle.
func (r *Rescuer) list() []*Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := make([]*Container, 0, len(r.byH))
	for _, c := range r.byH {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].H < cs[j].H })
	return cs
}
