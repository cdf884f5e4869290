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
	rescue  *rescue.Rescuer
	sampler ticker // the cgroupfs period loop (nil: kernel backend)

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
	h    uint32
	c    containers.Container
	g    *cgroups.Group
	e    *limits.Entry
	cgID uint64
	orig limits.Current    // the limits to put back without a controller
	oom  *rescue.Container // its OOM episodes; oom.Armed: telemetry and OOM trap set up
	// restored: its limits were put back since the last session ended.
	restored atomic.Bool

	thrMu    sync.Mutex
	thrAt    time.Time // last throttle event not yet answered by a raise
	thrQuota int64     // the quota it was throttled at
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
	a.rescue = rescue.New(rescue.Config{
		Deadline: cfg.OOMDeadline, StockOOM: a.stockOOM(), OnRescue: cfg.OnOOMRescue, Log: cfg.Log,
		Metrics: rescue.Metrics{Rescue: a.m.oomRescue, Events: a.m.oomEvents, Outcome: a.m.oomOutcome},
	}, a.link, a.app, a.src)
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
		goRun(func() { a.rescue.Watchdog(ctx) })
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
	m.oom = &rescue.Container{H: m.h, Name: c.Name, G: g, Mem: e}
	a.byID[c.ID], a.byH[m.h] = m, m
	a.rescue.Add(m.oom)
	a.mu.Unlock()
	a.app.Add(m.h, e)
	if a.cpu != nil {
		cur, _ := e.Current()
		a.cpu.add(m.h, c, cur)
	}
	if err := a.src.Watch(m.h, g); err != nil {
		a.log.Warn("container managed without OOM trap", "name", c.Name, "err", err)
	}
	m.oom.Armed.Store(true)
	a.log.Info("managing container", "name", c.Name, "id", short(c.ID), "app", c.App, "handle", m.h, "cgroup", p.Key())
	_ = a.link.Register(a.registration(m))
}

func (a *Agent) remove(m *managed, why string) {
	a.mu.Lock()
	if a.byID[m.c.ID] == m {
		delete(a.byID, m.c.ID)
	}
	delete(a.byH, m.h)
	a.rescue.Remove(m.h)
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
		if m.oom.Armed.Load() {
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
	return m != nil && m.oom.Armed.Load()
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
		if m.oom.Armed.Load() {
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
					a.rescue.LimitRaised(m.oom, u.Limits.GetMemoryLimitBytes())
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

// OOM implements source.Sink: the episode is the rescue's.
func (a *Agent) OOM(ev rescue.Event) { a.rescue.OOM(ev) }

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
