package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/internal/cgtest"
	"github.com/escra-dev/escra/daemon/internal/peer"
	"github.com/escra-dev/escra/daemon/telemetry"
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
	telemetry.Source
	b pb.Backend
}

func (s stubSource) Backend() pb.Backend { return s.b }

// auto prefers kernel > bpf > cgroupfs; an explicit backend that cannot
// start is an error, not a fallback.
func TestBackendChoice(t *testing.T) {
	up := func(b pb.Backend) KernelSourceFunc {
		return func(time.Duration, *slog.Logger) (telemetry.Source, error) { return stubSource{b: b}, nil }
	}
	down := func(time.Duration, *slog.Logger) (telemetry.Source, error) {
		return nil, errors.New("bpf backend: not permitted")
	}
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
		a, err := New(Config{Backend: c.backend, KernelSource: c.kernel, BPFSource: c.bpf,
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
