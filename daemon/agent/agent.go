// Package agent is escrad's core (Escra's "Escra Agent"): it joins the
// container sources, the cgroups, the telemetry source (daemon/source),
// the OOM rescue (daemon/rescue), the limit applier and the controller
// link. By concept: agent.go (Config, New, Run), backend.go (choosing the
// source), lifecycle.go (containers managed and registered), limits.go
// (the controller's limits and reclaim), leases.go (host-local lease
// credit), throttleclock.go, sink.go (what the source delivers).
package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/client"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/daemon/link"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/version"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Config configures an agent.
type Config struct {
	HostID      string
	Controller  string        // TCP address of escra-controller; A,B,… for several (one leads)
	Period      time.Duration // telemetry period (CFS period), 100 ms
	OOMDeadline time.Duration // verdict deadline; 0: 200 ms, on escra.ko its oom_timeout_ms minus OOMReplyMargin
	// OOMTimeoutParam is escra.ko's oom_timeout_ms file (tests; "": the
	// module's sysfs parameter).
	OOMTimeoutParam string
	Heartbeat       time.Duration // heartbeat and usage snapshot interval, 1 s
	ControllerDead  time.Duration // a controller silent this long ends the session; 0: 3 s
	Backend         string        // auto, kernel, cgroupfs
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
	// Identity, when set, is the reloadable files TLS was made from
	// (auth.Identity): their expiry is exported.
	Identity *auth.Identity
	// ThrottlePoll is the cgroupfs throttle watcher's poll interval
	// (cgroupfs.Source.ThrottlePoll; 0: off; escrad defaults to 10 ms).
	// The kernel backend has no watcher yet: it ignores this.
	ThrottlePoll time.Duration
	// ThrottleNear is the share of its quota a group may use within a CFS
	// period before the watcher reports it as about to be throttled
	// (cgroupfs.Source.ThrottleNear; 0: the default 0.95; < 0: off).
	ThrottleNear float64
	// ThrottleHot: only groups whose last period used this share of their
	// quota (or were throttled) are polled between periods
	// (cgroupfs.Source.ThrottleHot; 0: the default 0.8; < 0: every group
	// with a quota).
	ThrottleHot float64
	// ThrottleWarm is how often an idle host checks its parents' usage
	// for a group running into its quota (cgroupfs.Source.ThrottleWarm;
	// 0: the default 20 ms; < 0: only period records make a group hot).
	ThrottleWarm time.Duration
	// OnThrottleRaise, when set, sees every quota raise that answers a
	// throttle event: the event seen to the raising write returned.
	OnThrottleRaise func(h uint32, took time.Duration)
	// OnLeaseRaise, when set, sees every raise from host-local lease
	// credit: the event seen to the raising write returned (host-local leases).
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
	// labels (WYSIWYG containers): hard (principle-hard, the default), besteffort,
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

	// Host-local lease credit per app. Held while a use is
	// written and sent, so a return never overtakes a use on the wire and
	// credit of an ended session is never spent on the next one.
	leaseMu sync.Mutex
	credit  map[string]*leaseCredit
	cores   int64
	// Host-local memory credit per app (memcredit.go), under the same
	// rule as leaseMu.
	memMu      sync.Mutex
	memCredits map[string]*memCredit

	img *imageTracker
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

	if err := a.chooseSource(cfg); err != nil {
		return nil, err
	}
	if cfg.OOMDeadline, err = oomDeadline(cfg.OOMDeadline, a.src.Backend() == pb.Backend_BACKEND_KERNEL, cfg.OOMTimeoutParam); err != nil {
		return nil, err
	}
	a.cfg.OOMDeadline = cfg.OOMDeadline
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
		Addr: cfg.Controller, Addrs: strings.Split(cfg.Controller, ","), Heartbeat: cfg.Heartbeat, DeadAfter: cfg.ControllerDead, Log: cfg.Log, TLS: cfg.TLS,
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
		Metrics: rescue.Metrics{Rescue: a.m.oomRescue, Events: a.m.oomEvents, Outcome: a.m.oomOutcome, LateGrants: a.m.oomLate, Via: a.m.oomVia},
		Credit:  a,
	}, a.link, a.app, a.src)
	return a, nil
}

// OOMDeadline is the verdict deadline the agent runs with (see
// Config.OOMDeadline).
func (a *Agent) OOMDeadline() time.Duration { return a.cfg.OOMDeadline }

// Registry holds the agent's Prometheus metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Applier exposes the limit applier (benchmarks).
func (a *Agent) Applier() *limits.Applier { return a.app }

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
