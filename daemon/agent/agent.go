// Package agent is escrad's core (seed 000's "Escra Agent"): it joins the
// container sources, the cgroups, the telemetry/OOM source, the limit
// applier and the controller link.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/daemon/link"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/internal/version"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Backend choices.
const (
	BackendAuto     = "auto"
	BackendKernel   = "kernel"
	BackendBPF      = "bpf"
	BackendCgroupfs = "cgroupfs"
)

// KernelSourceFunc builds the escra.ko (generic netlink) Source
// (kmod.NewSource).
type KernelSourceFunc func(period time.Duration, log *slog.Logger) (source.Source, error)

// Config configures an agent.
type Config struct {
	HostID      string
	Controller  string        // TCP address of escra-controller; A,B,… for several (one leads)
	Period      time.Duration // telemetry period (CFS period), 100 ms
	OOMDeadline time.Duration // verdict deadline, 200 ms
	Heartbeat   time.Duration // heartbeat and usage snapshot interval, 1 s
	Backend     string        // auto, kernel, cgroupfs
	// KernelSource builds the kernel backend (kmod.NewSource); with Backend
	// auto it is tried first. Nil: no kernel backend in this binary.
	KernelSource KernelSourceFunc
	// BPFSource builds the bpf backend (bpf.NewSource): stock kernels
	// with BTF. With Backend auto it is tried after the kernel backend.
	BPFSource KernelSourceFunc
	Docker    *client.Client
	Cgroups   []containers.CgroupSpec
	// Apps, when not empty, limits management to these escra.app values
	// (several escrads, or tests and benchmarks, sharing one engine).
	Apps []string
	Log  *slog.Logger
	// NoParentShortcut turns off the cgroupfs sampler's idle-parent check
	// (benchmarks measure what it saves).
	NoParentShortcut bool
	// OnOOMRescue, when set, sees every rescue: OOM wake-up to the raising
	// write issued (the kernel wakes the tasks inside it) and to the write
	// returned; the benchmark uses it.
	OnOOMRescue func(issued, returned time.Duration)
	// TLS is the controller link's mutual TLS (nil: plain, escrad --insecure).
	TLS *tls.Config
	// ThrottlePoll is the cgroupfs throttle watcher's poll interval
	// (cgroupfs.Source.ThrottlePoll; 0: off; escrad defaults to 2 ms).
	// The kernel backend has no watcher yet: it ignores this.
	ThrottlePoll time.Duration
	// ThrottleNear is the share of its quota a group may use within a CFS
	// period before the watcher reports it as about to be throttled
	// (cgroupfs.Source.ThrottleNear; 0: the default 0.95; < 0: off).
	ThrottleNear float64
	// OnThrottleRaise, when set, sees every quota raise that answers a
	// throttle event: the event seen to the raising write returned.
	OnThrottleRaise func(h uint32, took time.Duration)
	// OnLeaseRaise, when set, sees every raise from host-local lease
	// credit: the event seen to the raising write returned (issue 11).
	OnLeaseRaise func(h uint32, took time.Duration)
	// DockerSync is how often, at most, Docker's view of a container's
	// limits (docker inspect) is brought up to the cgroup: a docker update
	// runs runc, milliseconds of CPU each (0: limits.DefaultReconcileWindow;
	// < 0: never).
	DockerSync time.Duration
	// RestoreAfter puts back the limits Docker knows (or, for configured
	// cgroups, the ones found at start) once no controller session has
	// been up for this long; 0: never (escrad --restore-after).
	RestoreAfter time.Duration
	// CPUPlacement is the host CPU allocator's mode for escra.cpu
	// labels (seed 001): hard (principle-hard, the default), besteffort,
	// or off.
	CPUPlacement string
	// ViewDir holds per-container CPU views (DefaultViewDir when empty).
	ViewDir string
	// CPUProfileDir holds escractl profile's verdicts per image, which
	// resolve escra.cpu=auto (wysiwyg.DefaultProfileDir when empty).
	CPUProfileDir string
	// PullRegistries are the registries (host:port as in an image
	// reference) the deployer's creates may pull a missing image from
	// (escrad --pull-registries); empty: never pull.
	PullRegistries []string
	// ImageBudget bounds the engine's image store in bytes; least recently
	// used images no container uses are removed past it (0: no budget).
	ImageBudget int64
	// CFSBurst, in [0, 1], keeps every managed container's CFS burst at
	// this share of its quota (limits.Applier.Burst; escrad --cfs-burst).
	// 0 leaves bursts alone.
	CFSBurst float64
}

// Agent manages one host's labelled containers.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	src     source.Source
	app     *limits.Applier
	cpu     *cpuMgr // nil: CPU placement off
	rec     *limits.Reconciler
	link    *link.Client
	reg     *prometheus.Registry
	m       metrics
	cgVer   cgroups.Version
	started chan struct{}
	ping    chan chan struct{} // Healthy's probe of the event loop
	oomBeat atomic.Int64       // unix ns of oomWatchdog's last round
	sampler ticker             // the cgroupfs period loop (nil: kernel backend)

	mu    sync.Mutex
	byID  map[string]*managed
	byH   map[uint32]*managed
	nextH uint32

	// Host-local lease credit per app (issue 11). Held while a use is
	// written and sent, so a return never overtakes a use on the wire and
	// credit of an ended session is never spent on the next one.
	leaseMu sync.Mutex
	credit  map[string]*leaseCredit
	cores   int64

	img *imageTracker
}

type leaseCredit struct {
	id uint64
	us int64
}

type managed struct {
	h       uint32
	c       containers.Container
	g       *cgroups.Group
	e       *limits.Entry
	cgID    uint64
	orig    limits.Current // the limits to put back without a controller
	pending atomic.Bool    // an OOM request is out
	armed   atomic.Bool    // telemetry and OOM trap set up
	again   atomic.Bool    // an OOM event came while one was pending
	// restored: its limits were put back since the last session ended.
	restored atomic.Bool

	thrMu    sync.Mutex
	thrAt    time.Time // last throttle event not yet answered by a raise
	thrQuota int64     // the quota it was throttled at

	oomMu    sync.Mutex
	oomAt    time.Time // wake-up of the pending OOM
	oomLimit int64     // limit it hit
	rescued  bool      // limit raised since
}

// noteRaise records the rescue moment of a pending OOM when its limit has
// just been raised above the one it hit (by a SetLimits or a verdict).
func (a *Agent) noteRaise(m *managed, limit int64) {
	if !m.pending.Load() {
		return
	}
	m.oomMu.Lock()
	if m.rescued || m.oomAt.IsZero() || (limit != cgroups.Max && limit <= m.oomLimit) {
		m.oomMu.Unlock()
		return
	}
	m.rescued = true
	at := m.oomAt
	m.oomMu.Unlock()
	returned := time.Since(at)
	issued := returned
	if w := m.e.MemoryWriteIssued(); w.After(at) {
		issued = w.Sub(at)
	}
	a.m.oomRescue.Observe(issued.Seconds())
	if a.cfg.OnOOMRescue != nil {
		a.cfg.OnOOMRescue(issued, returned)
	}
}

// Validate checks what New checks without touching the host: the
// configured cgroups, the app names and the backend name (escrad
// --check-config).
func Validate(cfg Config) error {
	if err := (containers.Static{Specs: cfg.Cgroups}).Validate(); err != nil {
		return err
	}
	for _, app := range cfg.Apps {
		if err := containers.ValidateApp(app); err != nil {
			return fmt.Errorf("apps: %w", err)
		}
	}
	if !(cfg.CFSBurst >= 0 && cfg.CFSBurst <= 1) {
		return fmt.Errorf("cfs burst %v outside [0, 1] (the kernel refuses a burst above the quota)", cfg.CFSBurst)
	}
	switch cfg.Backend {
	case BackendKernel, BackendBPF, BackendAuto, BackendCgroupfs, "":
		return nil
	}
	return fmt.Errorf("unknown backend %q (want auto, kernel, bpf or cgroupfs)", cfg.Backend)
}

// New checks cfg and builds the agent (nothing runs until Run).
func New(cfg Config) (*Agent, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Period <= 0 {
		cfg.Period = 100 * time.Millisecond
	}
	if cfg.OOMDeadline <= 0 {
		cfg.OOMDeadline = 200 * time.Millisecond
	}
	if cfg.HostID == "" {
		cfg.HostID, _ = os.Hostname()
	}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Log, app: limits.New(), byID: map[string]*managed{}, byH: map[uint32]*managed{},
		credit: map[string]*leaseCredit{}, cores: int64(runtime.NumCPU()), img: newImageTracker(),
		reg: prometheus.NewRegistry(), cgVer: cgroups.HostVersion(), started: make(chan struct{}), ping: make(chan chan struct{})}
	a.app.Burst = cfg.CFSBurst
	a.m = newMetrics(a.reg, a)
	var err error
	if a.cpu, err = newCPUMgr(cfg.CPUPlacement, hostCPUs(), a.app, cfg.ViewDir, cfg.Log); err != nil {
		return nil, err
	}
	if a.cpu != nil && cfg.CPUProfileDir != "" {
		a.cpu.profiles = cfg.CPUProfileDir
	}

	// auto prefers kernel > bpf > cgroupfs (issue 13).
	auto := false
	switch cfg.Backend {
	case BackendAuto, "":
		auto = true
	case BackendKernel, BackendBPF, BackendCgroupfs:
	default:
		return nil, fmt.Errorf("unknown backend %q (want auto, kernel, bpf or cgroupfs)", cfg.Backend)
	}
	if auto || cfg.Backend == BackendKernel {
		if cfg.KernelSource != nil {
			src, err := cfg.KernelSource(cfg.Period, cfg.Log)
			if err == nil {
				a.src = src
			} else if !auto {
				return nil, fmt.Errorf("kernel backend: %w", err)
			} else {
				cfg.Log.Info("kernel backend unavailable", "err", err)
			}
		} else if !auto {
			return nil, errors.New("kernel backend: not built into this escrad (use --backend cgroupfs or auto)")
		}
	}
	if a.src == nil && (auto || cfg.Backend == BackendBPF) {
		if cfg.BPFSource != nil {
			src, err := cfg.BPFSource(cfg.Period, cfg.Log)
			if err == nil {
				a.src = src
				// --throttle-poll 0 turns throttle events off here too.
				if te, ok := src.(interface{ SetThrottleEvents(bool) }); ok {
					te.SetThrottleEvents(cfg.ThrottlePoll > 0)
				}
				// --throttle-near applies to the program's near records.
				if tn, ok := src.(interface{ SetThrottleNear(float64) error }); ok && cfg.ThrottleNear != 0 {
					if err := tn.SetThrottleNear(max(cfg.ThrottleNear, 0)); err != nil {
						cfg.Log.Warn("throttle-near not applied to the bpf backend; throttle records only", "err", err)
					}
				}
			} else if !auto {
				return nil, err // already says "bpf backend: ..."
			} else {
				cfg.Log.Info("bpf backend unavailable; using cgroupfs", "err", err)
			}
		} else if !auto {
			return nil, errors.New("bpf backend: not built into this escrad (use --backend cgroupfs or auto)")
		}
	}
	if a.src == nil {
		cs, err := cgroupfs.NewSource(cfg.Period, cfg.Log)
		if err != nil {
			return nil, err
		}
		cs.Limits = a.cpuLimits
		cs.NoParentShortcut = cfg.NoParentShortcut
		cs.ThrottlePoll = cfg.ThrottlePoll
		switch {
		case cfg.ThrottleNear < 0:
			cs.ThrottleNear = 0
		case cfg.ThrottleNear > 0:
			cs.ThrottleNear = cfg.ThrottleNear
		}
		a.src = cs
		a.sampler = cs
	}
	if cfg.Docker != nil && cfg.DockerSync >= 0 {
		a.rec = &limits.Reconciler{A: a.app, Docker: cfg.Docker, Log: cfg.Log, Window: cfg.DockerSync, Settled: a.settled}
		a.app.Reconcile = a.rec
	}
	var mem uint64
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		mem = uint64(si.Totalram) * uint64(si.Unit)
	}
	var un unix.Utsname
	_ = unix.Uname(&un)
	cgv := pb.CgroupVersion_CGROUP_VERSION_V1
	if a.cgVer == cgroups.V2 {
		cgv = pb.CgroupVersion_CGROUP_VERSION_V2
	}
	a.link = link.New(link.Config{
		Addr: cfg.Controller, Addrs: strings.Split(cfg.Controller, ","), Heartbeat: cfg.Heartbeat, Log: cfg.Log, TLS: cfg.TLS,
		Hello: &pb.HostHello{
			HostId: cfg.HostID, Cores: uint32(runtime.NumCPU()), MemoryBytes: mem,
			Backend: a.src.Backend(), CgroupVersion: cgv,
			KernelRelease: unix.ByteSliceToString(un.Release[:]), DaemonVersion: version.Version,
			RestoreAfterMs: uint32(min(cfg.RestoreAfter.Milliseconds(), math.MaxUint32)),
		},
	}, a)
	a.link.SetPeriod(uint32(cfg.Period / time.Microsecond))
	return a, nil
}

// Registry holds the agent's Prometheus metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Applier exposes the limit applier (benchmarks).
func (a *Agent) Applier() *limits.Applier { return a.app }

// Backend names the telemetry source in use.
func (a *Agent) Backend() string {
	switch a.src.Backend() {
	case pb.Backend_BACKEND_KERNEL:
		return BackendKernel
	case pb.Backend_BACKEND_BPF:
		return BackendBPF
	}
	return BackendCgroupfs
}

// stockOOM: OOMs are trapped from user space (source/cgroupfs: v1 eventfd,
// v2 memory.high brake), as the cgroupfs and bpf backends do; escra.ko
// holds the charge in the kernel instead.
func (a *Agent) stockOOM() bool {
	b := a.src.Backend()
	return b == pb.Backend_BACKEND_CGROUPFS || b == pb.Backend_BACKEND_BPF
}

// CgroupVersion is the host's cgroup version.
func (a *Agent) CgroupVersion() cgroups.Version { return a.cgVer }

// Run runs until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	goRun := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	evs := make(chan containers.Event, 64)
	goRun(func() {
		if err := a.src.Run(ctx, a); err != nil {
			a.log.Error("telemetry source stopped", "err", err)
		}
	})
	goRun(func() { a.link.Run(ctx) })
	if a.stockOOM() {
		goRun(func() { a.oomWatchdog(ctx) })
	}
	if a.rec != nil {
		goRun(func() { a.rec.Run(ctx) })
	}
	if a.cfg.RestoreAfter > 0 {
		goRun(func() { a.restoreLoop(ctx) })
	}
	if a.cfg.Docker != nil {
		d := &containers.Docker{Client: a.cfg.Docker, Log: a.log}
		goRun(func() { _ = d.Run(ctx, evs) })
		goRun(func() { a.imageLoop(ctx) })
	}
	if len(a.cfg.Cgroups) > 0 {
		s := containers.Static{Specs: a.cfg.Cgroups}
		goRun(func() { _ = s.Run(ctx, evs) })
	}
	close(a.started)
	for {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			a.mu.Lock()
			for _, m := range a.byH {
				m.g.Close()
			}
			a.mu.Unlock()
			return nil
		case ev := <-evs:
			a.handle(ev)
		case r := <-a.ping:
			close(r)
		}
	}
}

func (a *Agent) handle(ev containers.Event) {
	switch ev.Kind {
	case containers.Started:
		a.mu.Lock()
		old := a.byID[ev.Container.ID]
		a.mu.Unlock()
		if old != nil {
			if old.c.Pid == ev.Container.Pid {
				return // relisted after a reconnect: nothing changed
			}
			a.remove(old, "restarted")
		}
		a.add(ev.Container)
	case containers.Stopped:
		a.mu.Lock()
		m := a.byID[ev.ID]
		a.mu.Unlock()
		if m != nil {
			a.remove(m, "stopped")
		}
	case containers.Synced:
		a.mu.Lock()
		var gone []*managed
		for id, m := range a.byID {
			if m.c.Docker && !ev.Live[id] {
				gone = append(gone, m)
			}
		}
		a.mu.Unlock()
		for _, m := range gone {
			a.remove(m, "gone after engine reconnect")
		}
	}
}

func (a *Agent) add(c containers.Container) {
	if len(a.cfg.Apps) > 0 && !slices.Contains(a.cfg.Apps, c.App) {
		a.log.Debug("not managing container of another app", "name", c.Name, "app", c.App)
		return
	}
	var p cgroups.Paths
	var err error
	if c.Pid > 0 {
		p, err = cgroups.PathsForPID(c.Pid)
	} else {
		p, err = cgroups.PathsForCgroup(c.CgroupPath)
	}
	if err != nil {
		a.log.Warn("skipping container: cgroup not found", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	g, err := cgroups.Open(p)
	if err != nil {
		a.log.Warn("skipping container: cgroup files", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	e, err := limits.NewEntry(c.ID, c.Docker, g)
	if err != nil {
		g.Close()
		a.log.Warn("skipping container: cgroup limits", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	e.DockerNanoCPUs.Store(c.Docker && c.Limits.NanoCPUs > 0)
	m := &managed{c: c, g: g, e: e}
	m.orig, _ = e.Current()
	if c.Docker {
		m.orig = dockerLimits(c.Limits, m.orig)
	}
	if p.Version == cgroups.V2 {
		var st unix.Stat_t
		if unix.Stat(p.Unified, &st) == nil {
			m.cgID = st.Ino
		}
	}
	a.mu.Lock()
	a.nextH++
	m.h = a.nextH
	a.byID[c.ID], a.byH[m.h] = m, m
	a.mu.Unlock()
	a.app.Add(m.h, e)
	if a.cpu != nil {
		cur, _ := e.Current()
		a.cpu.add(m.h, c, cur)
	}
	if err := a.src.Watch(m.h, g); err != nil {
		a.log.Warn("container managed without OOM trap", "name", c.Name, "err", err)
	}
	m.armed.Store(true)
	a.log.Info("managing container", "name", c.Name, "id", short(c.ID), "app", c.App, "handle", m.h, "cgroup", p.Key())
	_ = a.link.Register(a.registration(m))
}

func (a *Agent) remove(m *managed, why string) {
	a.mu.Lock()
	if a.byID[m.c.ID] == m {
		delete(a.byID, m.c.ID)
	}
	delete(a.byH, m.h)
	a.mu.Unlock()
	a.src.Unwatch(m.h)
	if a.cpu != nil {
		a.cpu.remove(m.h)
	}
	a.app.Remove(m.h)
	m.g.Close()
	a.log.Info("container no longer managed", "name", m.c.Name, "id", short(m.c.ID), "why", why)
	_ = a.link.Unregister(&pb.ContainerUnregister{Handle: m.h, ContainerId: m.c.ID, Reason: why})
}

func (a *Agent) registration(m *managed) *pb.ContainerRegister {
	cur, _ := m.e.Current()
	usage, _ := m.g.ReadInt(cgroups.MemUsage)
	return &pb.ContainerRegister{
		Handle: m.h, ContainerId: m.c.ID, Name: m.c.Name, App: m.c.App, CgroupId: m.cgID,
		CgroupPath: m.g.Paths.Key(), MemoryUsageBytes: uint64(max(usage, 0)),
		Limits: &pb.Limits{CpuQuotaUs: cur.CPUQuotaUs, CpuPeriodUs: cur.CPUPeriodUs, MemoryLimitBytes: cur.MemoryBytes, CpusetCpus: cur.CpusetCpus},
	}
}

func (a *Agent) cpuLimits(h uint32) (int64, uint32) {
	e := a.app.Get(h)
	if e == nil {
		return -1, 0
	}
	c, _ := e.Current()
	return c.CPUQuotaUs, c.CPUPeriodUs
}

func (a *Agent) list() []*managed {
	a.mu.Lock()
	defer a.mu.Unlock()
	ms := make([]*managed, 0, len(a.byH))
	for _, m := range a.byH {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].h < ms[j].h })
	return ms
}

// Managed lists the containers whose telemetry and OOM trap are set up,
// ids by handle (tests, benchmarks).
func (a *Agent) Managed() map[uint32]string {
	out := map[uint32]string{}
	for _, m := range a.list() {
		if m.armed.Load() {
			out[m.h] = m.c.ID
		}
	}
	return out
}

// IsManaged reports whether container id is managed with its trap set.
func (a *Agent) IsManaged(id string) bool {
	a.mu.Lock()
	m := a.byID[id]
	a.mu.Unlock()
	return m != nil && m.armed.Load()
}

// --- link.Handler ---------------------------------------------------------

// Registrations implements link.Handler. Only containers whose telemetry
// and OOM trap are set up are listed (add registers the others itself once
// they are): a session that came up in the middle of add registered the
// container early, and the controller's first memory limit then reached a
// v2 group before its brake was watched, so memory.high never followed it
// (vm-test cgroupfs-oom-grant, once under two busy loops).
func (a *Agent) Registrations() []*pb.ContainerRegister {
	ms := a.list()
	out := make([]*pb.ContainerRegister, 0, len(ms))
	for _, m := range ms {
		if m.armed.Load() {
			out = append(out, a.registration(m))
		}
	}
	return out
}

// SetLimits implements link.Handler: the fast path.
func (a *Agent) SetLimits(recv time.Time, s *pb.SetLimits) *pb.SetLimitsAck {
	ack := &pb.SetLimitsAck{Applied: make([]*pb.SetLimitsAck_Applied, len(s.Updates))}
	for i, u := range s.Updates {
		var err error
		if u.Limits.GetCpuQuotaUs() != 0 && a.cpu.manages(u.Handle) {
			err = a.applyPlaced(u)
		} else {
			err = a.app.Apply(u.Handle, u.Generation, u.Limits)
		}
		done := time.Now()
		lat := done.Sub(recv)
		ap := &pb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, AppliedUnixNs: done.UnixNano(), ApplyLatencyNs: uint64(lat)}
		if err != nil {
			ap.Error = err.Error()
			a.m.applyErrors.Inc()
			if !errors.Is(err, limits.ErrStale) && !errors.Is(err, limits.ErrUnknown) {
				a.log.Warn("applying limits failed", "handle", u.Handle, "err", err)
			}
		} else {
			a.m.applyLatency.Observe(lat.Seconds())
			if a.app.HoldAck(u.Handle, u.Generation) {
				ap.Deferred = true // Agent.settled sends the ack
				a.m.acksDeferred.Inc()
			}
			if q := u.Limits.GetCpuQuotaUs(); q != 0 {
				a.noteQuota(u.Handle, q, done)
			}
			if u.Limits.GetMemoryLimitBytes() != 0 {
				a.mu.Lock()
				m := a.byH[u.Handle]
				a.mu.Unlock()
				if m != nil {
					a.followLimit(m)
					a.noteRaise(m, u.Limits.GetMemoryLimitBytes())
				}
			}
		}
		ack.Applied[i] = ap
	}
	return ack
}

// settled sends the acknowledgements SetLimits deferred for h, up to
// generation gen, once Docker's view settled (limits.Reconciler.Settled).
func (a *Agent) settled(h uint32, gen uint64) {
	now := time.Now().UnixNano()
	_ = a.link.LateAck(&pb.SetLimitsAck{Applied: []*pb.SetLimitsAck_Applied{{Handle: h, Generation: gen, AppliedUnixNs: now}}})
}

// applyPlaced applies an update of a C1 (escra.cpu=wysiwyg) container
// through the CPU allocator, which moves its cpuset around the quota.
func (a *Agent) applyPlaced(u *pb.LimitUpdate) error {
	e := a.app.Get(u.Handle)
	if e == nil {
		return limits.ErrUnknown
	}
	cur, gen := e.Current()
	if u.Generation != 0 && u.Generation < gen {
		return limits.ErrStale
	}
	period := u.Limits.GetCpuPeriodUs()
	if period == 0 {
		period = cur.CPUPeriodUs
	}
	return a.cpu.setQuota(u, period, func(l *pb.Limits) error { return a.app.Apply(u.Handle, u.Generation, l) })
}

// followLimit tells the source that m's memory limit was written (cgroupfs
// on v2 moves its memory.high brake with it; a limit lowered by reclaim
// must not leave the brake above memory.max, where it never fires).
func (a *Agent) followLimit(m *managed) {
	if f, ok := a.src.(source.LimitFollower); ok {
		cur, _ := m.e.Current()
		f.MemoryLimitChanged(m.h, cur.MemoryBytes)
	}
}

// Reclaim implements link.Handler (seed 000 §IV-C).
func (a *Agent) Reclaim(r *pb.ReclaimRequest) *pb.ReclaimResult {
	res := &pb.ReclaimResult{Reclaimed: a.app.Reclaim(r.SafeMarginBytes, r.Handles)}
	var sum uint64
	for _, x := range res.Reclaimed {
		sum += x.ReclaimedBytes
		a.mu.Lock()
		m := a.byH[x.Handle]
		a.mu.Unlock()
		if m != nil {
			a.followLimit(m)
		}
	}
	a.m.reclaimed.Add(float64(sum))
	return res
}

// MemoryUsage implements link.Handler.
func (a *Agent) MemoryUsage() *pb.MemoryUsage {
	ms := a.list()
	mu := &pb.MemoryUsage{TakenUnixNs: time.Now().UnixNano(), Samples: make([]*pb.MemoryUsage_Sample, 0, len(ms))}
	for _, m := range ms {
		u, err := m.g.ReadInt(cgroups.MemUsage)
		if err != nil {
			continue
		}
		cur, _ := m.e.Current()
		// CPU usage travels in the per-period telemetry; the snapshot
		// stays one read per container (it runs every heartbeat).
		mu.Samples = append(mu.Samples, &pb.MemoryUsage_Sample{Handle: m.h, UsageBytes: uint64(max(u, 0)), LimitBytes: cur.MemoryBytes})
	}
	return mu
}

// --- source.Sink -------------------------------------------------------

// CPU implements source.Sink.
func (a *Agent) CPU(s *pb.CpuStat) {
	if s.MidPeriod {
		a.m.thrEvents.Inc()
		if a.leaseRaise(s.Handle) {
			return // a full step from the lease: the controller would raise again
		}
		a.noteThrottle(s.Handle, s.QuotaUs)
	} else {
		a.m.records.Inc()
	}
	a.link.CPU(s)
}

// leaseRaise answers a throttle event from the app's lease credit, if
// any (issue 11, host-local leases): the quota grows at once by
// min(credit, max(quota, credit/2)), capped at host cores × period, and
// the use is reported. It reports whether the event was covered: the
// raise at least doubled the quota, the escra policy's own first step.
// A smaller raise is relief until the controller's answer, so the event
// still goes to the controller (a lease smaller than a burst must not
// hold back the policy's raise; a 3-host test under load starved a
// container that way).
func (a *Agent) leaseRaise(h uint32) bool {
	seen := time.Now()
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil || a.cpu.manages(h) {
		// A C1 container's quota moves with its cpuset: only through
		// the allocator (the controller's answer to the event).
		return false
	}
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	c := a.credit[m.c.App]
	if c == nil || c.us <= 0 {
		return false
	}
	var amount int64
	quota, err := a.app.RaiseCPU(h, func(cur int64, periodUs uint32) int64 {
		if cur <= 0 || periodUs == 0 {
			return 0 // unlimited, or unknown period
		}
		amount = min(c.us, max(cur, c.us/2), a.cores*int64(periodUs)-cur)
		return cur + max(amount, 0)
	})
	if err != nil || amount <= 0 {
		if err != nil {
			a.log.Warn("lease raise failed", "name", m.c.Name, "err", err)
		}
		return false
	}
	c.us -= amount
	took := time.Since(seen)
	a.m.leaseRaise.Observe(took.Seconds())
	if a.cfg.OnLeaseRaise != nil {
		a.cfg.OnLeaseRaise(h, took)
	}
	a.m.leaseUses.Inc()
	// Sent while leaseMu is held (see Agent.credit). A send that fails
	// means the session is ending: LeasesLost follows.
	_ = a.link.LeaseUse(&pb.CpuLeaseUse{App: m.c.App, LeaseId: c.id, Handle: h, AmountUs: amount, QuotaUs: quota})
	return amount >= quota-amount
}

// Lease implements link.LeaseHandler: a grant adds to the app's credit (a
// new lease id replaces it); a revoke is answered with what is left of
// that lease (0 when it is not the one held) and zeroes it.
func (a *Agent) Lease(l *pb.CpuLease) *pb.CpuLeaseReturn {
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	c := a.credit[l.App]
	if l.Revoke {
		ret := &pb.CpuLeaseReturn{App: l.App, LeaseId: l.LeaseId}
		if c != nil && c.id == l.LeaseId {
			ret.RemainingUs = c.us
			delete(a.credit, l.App)
		}
		return ret
	}
	if l.AddUs <= 0 || len(l.App) > 128 {
		return nil
	}
	if c == nil || c.id != l.LeaseId {
		c = &leaseCredit{id: l.LeaseId}
		a.credit[l.App] = c
	}
	c.us = min(c.us+min(l.AddUs, 1<<40), 1<<40) // bounded: no overflow on hostile input
	return nil
}

// LeasesLost implements link.LeaseHandler: the session ended, and the
// controller dropped its side of every lease.
func (a *Agent) LeasesLost() {
	a.leaseMu.Lock()
	clear(a.credit)
	a.leaseMu.Unlock()
}

// LeaseCredit is app's credit: lease id and µs (tests).
func (a *Agent) LeaseCredit(app string) (uint64, int64) {
	a.leaseMu.Lock()
	defer a.leaseMu.Unlock()
	if c := a.credit[app]; c != nil {
		return c.id, c.us
	}
	return 0, 0
}

// noteThrottle starts the clock of a throttle event; the first raise of
// the quota above the throttled one stops it (noteQuota). An event not
// answered within a second (the policy kept the quota) is forgotten, and
// so is one whose quota was cut since: an event at the lower quota is a
// new one.
func (a *Agent) noteThrottle(h uint32, quota int64) {
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil {
		return
	}
	now := time.Now()
	m.thrMu.Lock()
	if m.thrAt.IsZero() || now.Sub(m.thrAt) > time.Second || quota < m.thrQuota {
		m.thrAt, m.thrQuota = now, quota
	}
	m.thrMu.Unlock()
}

// noteQuota stops a throttle event's clock when quota raises the limit,
// and drops it when quota cuts the limit (the policy answered with a cut).
func (a *Agent) noteQuota(h uint32, quota int64, done time.Time) {
	a.mu.Lock()
	m := a.byH[h]
	a.mu.Unlock()
	if m == nil {
		return
	}
	m.thrMu.Lock()
	at := m.thrAt
	raised := !at.IsZero() && (quota == cgroups.Max || quota > m.thrQuota)
	cut := quota != cgroups.Max && quota < m.thrQuota
	if raised || cut || !at.IsZero() && done.Sub(at) > time.Second {
		m.thrAt = time.Time{}
	}
	m.thrMu.Unlock()
	if !raised {
		return
	}
	took := done.Sub(at)
	a.m.thrRaise.Observe(took.Seconds())
	if a.cfg.OnThrottleRaise != nil {
		a.cfg.OnThrottleRaise(h, took)
	}
}

// Flush implements source.Sink.
func (a *Agent) Flush() { a.link.Flush() }

// OOM implements source.Sink: ask the controller, and make sure the
// group is resolved one way or the other within the deadline.
func (a *Agent) OOM(ev rescue.Event) {
	a.mu.Lock()
	m := a.byH[ev.Handle]
	a.mu.Unlock()
	if m == nil {
		return
	}
	if !m.pending.CompareAndSwap(false, true) {
		// The tasks that resumed after a raise can hit the new limit
		// before the previous request is resolved: look again then.
		m.again.Store(true)
		return
	}
	a.m.oomEvents.Inc()
	m.oomMu.Lock()
	m.oomAt, m.oomLimit, m.rescued = ev.At, ev.Limit, false
	m.oomMu.Unlock()
	var once sync.Once
	var timer *time.Timer
	var reqID atomic.Uint64
	resolve := func(granted bool, limit int64, why string) {
		once.Do(func() {
			if timer != nil {
				timer.Stop()
			}
			if granted {
				a.noteRaise(m, limit)
				a.m.oomOutcome.WithLabelValues("granted").Inc()
			} else {
				a.m.oomOutcome.WithLabelValues(why).Inc()
				if m.g.Paths.Version == cgroups.V2 && a.stockOOM() {
					a.log.Warn("memory not granted: memory.high brake released, the kernel acts at memory.max", "name", m.c.Name, "why", why)
				} else {
					a.log.Warn("OOM not rescued: kernel OOM killer re-enabled", "name", m.c.Name, "why", why)
				}
			}
			if err := a.src.Resolve(ev, granted, limit); err != nil {
				a.log.Warn("resolving OOM", "name", m.c.Name, "err", err)
			}
			m.pending.Store(false)
			if m.again.Swap(false) {
				a.recheck(m)
			}
		})
	}
	// raised reports whether the limit is above the one that was hit (a
	// grant applied through the verdict or a SetLimits).
	raised := func() (int64, bool) {
		cur, _ := m.e.Current()
		return cur.MemoryBytes, ev.Limit > 0 && (cur.MemoryBytes == cgroups.Max || cur.MemoryBytes > ev.Limit)
	}
	req := &pb.OomRequest{Handle: m.h, UsageBytes: ev.Usage, LimitBytes: uint64(max(ev.Limit, 0))}
	timer = time.AfterFunc(a.cfg.OOMDeadline, func() {
		a.link.Cancel(reqID.Load())
		if lim, ok := raised(); ok {
			resolve(true, lim, "")
			return
		}
		resolve(false, 0, "deadline")
	})
	id, err := a.link.RequestOOM(req, func(v *pb.OomVerdict) {
		switch {
		case v == nil:
			resolve(false, 0, "controller_lost")
		case v.Granted:
			if lim, ok := raised(); ok {
				// The grant's SetLimits came first (the controller sends
				// the verdict once it is acknowledged). Writing the
				// verdict's limit again could undo a reclaim the
				// controller sent in between and has counted (issue 12:
				// Σ applied over the budget).
				resolve(true, lim, "")
				return
			}
			lim, err := a.app.RaiseMemory(m.h, v.NewLimitBytes)
			if err != nil {
				a.log.Warn("raising memory limit failed", "name", m.c.Name, "err", err)
				resolve(false, 0, "write_failed")
				return
			}
			if _, ok := raised(); ok {
				resolve(true, lim, "")
			} // else: wait for a SetLimits raise until the deadline
		default:
			resolve(false, 0, "denied")
		}
	})
	if err != nil {
		resolve(false, 0, "controller_unreachable")
		return
	}
	reqID.Store(id)
}

// recheck delivers an OOM event for m if it needs a verdict now and none
// is pending (an event swallowed while another was pending, or missed):
// on v1 its tasks wait in an OOM with the killer disabled; on v2 (cgroupfs)
// its usage is above the memory.high brake, so its tasks are throttled —
// after a grant the resumed tasks may already be past the new brake, and
// memory.events' next "high" increment may be long in coming. Nobody is
// left waiting for a verdict that no request asked for.
func (a *Agent) recheck(m *managed) {
	if m.pending.Load() || !m.armed.Load() {
		return
	}
	switch {
	case m.g.Paths.Version == cgroups.V1 && m.g.Has(cgroups.OOMControl):
		var buf [256]byte
		b, err := m.g.Read(cgroups.OOMControl, buf[:])
		if err != nil {
			return
		}
		if v, ok := cgroups.KeyedValue(b, "under_oom"); !ok || v == 0 {
			return
		}
		if v, ok := cgroups.KeyedValue(b, "oom_kill_disable"); !ok || v == 0 {
			return // released: the kernel OOM killer handles it
		}
	case m.g.Paths.Version == cgroups.V2 && m.g.Has(cgroups.MemHigh) && a.stockOOM():
		high, err := m.g.ReadInt(cgroups.MemHigh)
		if err != nil || high == cgroups.Max {
			return // no brake (unlimited, or released after a denial)
		}
		if u, err := m.g.ReadInt(cgroups.MemUsage); err != nil || u <= high {
			return
		}
	default:
		return
	}
	ev := rescue.Event{Handle: m.h, At: time.Now()}
	if u, err := m.g.ReadInt(cgroups.MemUsage); err == nil && u > 0 {
		ev.Usage = uint64(u)
	}
	ev.Limit, _ = m.g.ReadInt(cgroups.MemLimit)
	a.OOM(ev)
}

// oomWatchdog rechecks every trapped group now and then, and lets the
// source set released traps again (v1 oom_kill_disable, v2 brakes).
func (a *Agent) oomWatchdog(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	f, _ := a.src.(source.LimitFollower)
	a.oomBeat.Store(time.Now().UnixNano())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.oomBeat.Store(time.Now().UnixNano())
		for _, m := range a.list() {
			if f != nil && m.armed.Load() && !m.pending.Load() {
				f.Maintain(m.h)
			}
			a.recheck(m)
		}
	}
}

// Started is closed once Run has started its goroutines.
func (a *Agent) Started() <-chan struct{} { return a.started }

// Connected reports whether the controller session is up.
func (a *Agent) Connected() bool { return a.link.Connected() }

func short(id string) string {
	if len(id) > 12 && !strings.HasPrefix(id, "cgroup:") {
		return id[:12]
	}
	return id
}
