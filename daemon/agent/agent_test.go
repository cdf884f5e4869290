package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func run(t *testing.T, cfg Config) *Agent {
	t.Helper()
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Backend = BackendCgroupfs
	cfg.Heartbeat = 100 * time.Millisecond
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return a
}

// A plain cgroup named in the config (no Docker) is registered, and a
// process in it that outgrows its limit is rescued by a grant.
func TestConfiguredCgroupOOMRescueWithoutDocker(t *testing.T) {
	rel := cgtest.New(t, "agent-static")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(24<<20))
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.OnOOM = func(r *pb.OomRequest) *pb.OomVerdict {
		return &pb.OomVerdict{Handle: r.Handle, Granted: true, NewLimitBytes: int64(r.LimitBytes) + 32<<20}
	}
	run(t, Config{Controller: p.Addr(), Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}}})
	reg := p.WaitRegistered("cgroup:"+rel, 5*time.Second)
	if reg == nil || reg.App != "vms" || reg.Limits.GetMemoryLimitBytes() != 24<<20 {
		t.Fatalf("registration %v", reg)
	}
	if oc := cgtest.Read(t, "memory", rel, "memory.oom_control"); oc[:18] != "oom_kill_disable 1" {
		t.Fatalf("oom killer not disabled: %q", oc)
	}
	proc, err := cgtest.Start(rel, hog, "-mib", "64", "-step-mib", "8")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	ws, err := proc.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("memhog ended with %v, want exit 0 after grants", ws)
	}
	if p.OOMRequests() == 0 {
		t.Fatal("no OOM request: the limit was never hit")
	}
}

// A denial re-enables the kernel OOM killer: the process is killed.
func TestConfiguredCgroupOOMDenied(t *testing.T) {
	rel := cgtest.New(t, "agent-deny")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(24<<20))
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	run(t, Config{Controller: p.Addr(), Cgroups: []containers.CgroupSpec{{App: "vms", Path: rel}}})
	if p.WaitRegistered("cgroup:"+rel, 5*time.Second) == nil {
		t.Fatal("not registered")
	}
	time.Sleep(100 * time.Millisecond) // OOM trap armed after registration
	proc, err := cgtest.Start(rel, hog, "-mib", "64", "-step-mib", "8")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	ws, err := proc.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("memhog ended with %v, want SIGKILL by the OOM killer", ws)
	}
}

// After the controller goes away and comes back on the same address, the
// daemon reconnects and registers everything again.
func TestReconnectReRegisters(t *testing.T) {
	rel := cgtest.New(t, "agent-rereg")
	spin, err := cgtest.Start(rel, cgtest.Workload(t, "spin"), "-for", "30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spin.Kill)
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	addr := p.Addr()
	run(t, Config{Controller: addr, Cgroups: []containers.CgroupSpec{{App: "vms", Path: rel}}})
	if p.WaitRegistered("cgroup:"+rel, 5*time.Second) == nil {
		t.Fatal("not registered")
	}
	p.Close()
	time.Sleep(300 * time.Millisecond)
	p2, err := peer.StartAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	if p2.WaitRegistered("cgroup:"+rel, 10*time.Second) == nil {
		t.Fatal("not registered again after the controller came back")
	}
	// Telemetry flows on the new session (the group is busy: idle periods
	// would be gaps).
	deadline := time.Now().Add(3 * time.Second)
	for p2.Stats.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p2.Stats.Load() == 0 {
		t.Fatal("no telemetry on the new session")
	}
}

func TestBadConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{Backend: "gpu"},
		{Backend: BackendKernel},
		{Cgroups: []containers.CgroupSpec{{App: "bad app", Path: "/x"}}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// stubSource stands in for a backend in the choice below (the real ones
// need escra.ko or BPF privileges).
type stubSource struct {
	source.Source
	b pb.Backend
}

func (s stubSource) Backend() pb.Backend { return s.b }

// auto prefers kernel > bpf > cgroupfs; an explicit backend that cannot
// start is an error, not a fallback.
func TestBackendChoice(t *testing.T) {
	up := func(b pb.Backend) KernelSourceFunc {
		return func(time.Duration, *slog.Logger) (source.Source, error) { return stubSource{b: b}, nil }
	}
	down := func(time.Duration, *slog.Logger) (source.Source, error) {
		return nil, errors.New("bpf backend: not permitted")
	}
	param := paramFile(t, "100") // the stub kernel backend's escra.ko
	for _, c := range []struct {
		backend     string
		kernel, bpf KernelSourceFunc
		want        string
		fails       bool
	}{
		{BackendAuto, up(pb.Backend_BACKEND_KERNEL), up(pb.Backend_BACKEND_BPF), BackendKernel, false},
		{BackendAuto, down, up(pb.Backend_BACKEND_BPF), BackendBPF, false},
		{BackendAuto, nil, up(pb.Backend_BACKEND_BPF), BackendBPF, false},
		{BackendAuto, down, down, BackendCgroupfs, false},
		{"", nil, nil, BackendCgroupfs, false},
		{BackendBPF, up(pb.Backend_BACKEND_KERNEL), up(pb.Backend_BACKEND_BPF), BackendBPF, false},
		{BackendBPF, nil, down, "", true},
		{BackendBPF, nil, nil, "", true},
		{BackendKernel, down, up(pb.Backend_BACKEND_BPF), "", true},
		{BackendCgroupfs, up(pb.Backend_BACKEND_KERNEL), up(pb.Backend_BACKEND_BPF), BackendCgroupfs, false},
	} {
		a, err := New(Config{Backend: c.backend, KernelSource: c.kernel, BPFSource: c.bpf, OOMTimeoutParam: param,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if c.fails {
			if err == nil {
				t.Errorf("%q (kernel %v, bpf %v): accepted", c.backend, c.kernel != nil, c.bpf != nil)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.backend, err)
			continue
		}
		if a.Backend() != c.want {
			t.Errorf("%q (kernel %v, bpf %v): chose %v, want %v", c.backend, c.kernel != nil, c.bpf != nil, a.Backend(), c.want)
		}
	}
}

// staleSampler is a period loop that stopped a minute ago.
type staleSampler struct{}

func (staleSampler) LastTick() time.Time { return time.Now().Add(-time.Minute) }

// Healthy (what escrad's systemd watchdog pets on) is nil while the loops
// turn, and says which loop is stuck otherwise.
func TestHealthy(t *testing.T) {
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a := run(t, Config{Controller: p.Addr(), Period: 20 * time.Millisecond})
	<-a.Started()
	deadline := time.Now().Add(10 * time.Second)
	for a.sampler.LastTick().IsZero() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Healthy(context.Background()); err != nil {
		t.Fatalf("a running agent is unhealthy: %v", err)
	}
	if _, ok := a.src.(*cgroupfs.Source); !ok || a.sampler == nil {
		t.Fatal("the cgroupfs backend's period loop is not watched")
	}
	real := a.sampler
	a.sampler = staleSampler{}
	err = a.Healthy(context.Background())
	a.sampler = real
	if err == nil || !strings.Contains(err.Error(), "period sampler") {
		t.Fatalf("a stale sampler: Healthy = %v", err)
	}

	// An agent whose event loop has ended does not answer the probe.
	b, err := New(Config{Controller: p.Addr(), Backend: BackendCgroupfs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = b.Run(ctx)
	hctx, hcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer hcancel()
	if err := b.Healthy(hctx); err == nil || !strings.Contains(err.Error(), "event loop") {
		t.Fatalf("a stopped event loop: Healthy = %v", err)
	}
}

// escrad's /metrics carries per-container counters in seconds and gauges
// in bytes and cores that rate() works on, the build info and the Go and
// process collectors.
func TestContainerMetricsInBaseUnits(t *testing.T) {
	rel := cgtest.New(t, "agent-metrics")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "10000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "2500")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(96<<20))
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a := run(t, Config{Controller: p.Addr(), Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}}})
	if p.WaitRegistered("cgroup:"+rel, 5*time.Second) == nil {
		t.Fatal("not registered")
	}
	spin, err := cgtest.Start(rel, cgtest.Workload(t, "spin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spin.Kill)
	// value of one series of the family, labelled for the configured group
	value := func(name string) (float64, bool) {
		mfs, err := a.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				lab := map[string]string{}
				for _, l := range m.GetLabel() {
					lab[l.GetName()] = l.GetValue()
				}
				if name == "escra_build_info" || name == "go_goroutines" || name == "process_cpu_seconds_total" {
					return 1, true
				}
				if lab["app"] != "vms" || lab["name"] != "vm1" || lab["container"] != "cgroup:"+rel {
					t.Fatalf("%s labels %v", name, lab)
				}
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue(), true
				case m.Gauge != nil:
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	var used0 float64
	deadline := time.Now().Add(15 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		thr, _ := value("escra_container_cpu_throttled_seconds_total")
		used0, _ = value("escra_container_cpu_usage_seconds_total")
		if thr > 0 && used0 > 0 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	used1, _ := value("escra_container_cpu_usage_seconds_total")
	if used0 <= 0 || used1 <= used0 {
		t.Fatalf("cpu usage counter %v then %v: want positive and rising", used0, used1)
	}
	// A quarter of a core at most (2.5 ms per 10 ms), with room for the
	// 100 ms the counter may lag; a µs or ns unit would be off by 10^3+.
	if rate := (used1 - used0) / 0.5; rate > 0.6 {
		t.Errorf("cpu usage rate %.3f cores under a 0.25-core quota: not seconds", rate)
	}
	for name, want := range map[string]float64{"escra_container_cpu_limit_cores": 0.25, "escra_container_memory_max_bytes": 96 << 20} {
		if v, ok := value(name); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"escra_container_cpu_throttled_seconds_total", "escra_container_cpu_throttled_periods_total", "escra_container_memory_charged_bytes"} {
		if v, ok := value(name); !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want > 0", name, v, ok)
		}
	}
	for _, name := range []string{"escra_build_info", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := value(name); !ok {
			t.Errorf("%s missing", name)
		}
	}

	// The dashboard and the operator guide name only series escrad has
	// (the controller's escra_app_* and escra_decision_* aside).
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{"escrad_oom_outcomes_total": true} // a vector with no outcome yet
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, f := range []string{"../../packaging/grafana/escra-dashboard.json", "../../docs/operator.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`\b(escra_container_[a-z_]+|escrad_[a-z_]+|escra_build_info)`).FindAllString(string(b), -1) {
			n = strings.TrimSuffix(n, "_bucket")
			if strings.HasSuffix(n, "_") || n == "escra_container_cpu_period_usage_cores" ||
				strings.HasPrefix(n, "escra_container_oom_") || strings.HasPrefix(n, "escra_container_recommended_") ||
				n == "escra_container_throttle_events_total" {
				continue // the controller's per-container series
			}
			if !have[n] {
				t.Errorf("%s names %s, which escrad does not export", f, n)
			}
		}
	}
}

// auto falls back from the kernel backend quietly only when escra.ko is
// absent; a module that is there but refuses escrad (a unit without
// CAP_SYS_ADMIN) is a warning, with the capabilities named.
func TestAutoWarnsWhenTheModuleRefuses(t *testing.T) {
	for _, c := range []struct {
		err  error
		warn bool
	}{
		{kmod.ErrNoFamily, false},
		{fmt.Errorf("join telemetry: %w", syscall.EPERM), true},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		kernel := func(time.Duration, *slog.Logger) (source.Source, error) { return nil, c.err }
		bpfDown := func(time.Duration, *slog.Logger) (source.Source, error) { return nil, errors.New("bpf backend: off") }
		if _, err := New(Config{Backend: BackendAuto, KernelSource: kernel, BPFSource: bpfDown, Log: log}); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "CAP_SYS_ADMIN")
		if warned != c.warn {
			t.Errorf("kernel backend error %v: warned %v, want %v; log:\n%s", c.err, warned, c.warn, buf.String())
		}
	}
}
