package daemon_test

// Acceptance tests of escrad against the real Docker engine, real cgroups
// and real processes. The controller side is ctl (see controller_test.go):
// the real escra-controller when it builds, else the scripted peer.

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// Warnings reach the test's own output, so a failure on CI shows them;
	// the cleanup (registered before the daemons' own, so it runs after
	// they stopped) mutes any straggler.
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testWriter hands each log line to t.Log until the test is over.
type testWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (w *testWriter) Write(b []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

// e2eDockerSync is the Docker reconcile window of the agents these tests
// start (escrad --docker-sync; its default is limits.DefaultReconcileWindow).
const e2eDockerSync = 2 * time.Second

// startAgent runs an escrad agent against engine host ("" = main engine)
// and the controller at ctl until the test ends.
func startAgent(t *testing.T, host, ctl string, mod func(*agent.Config)) *agent.Agent {
	t.Helper()
	if host == "" {
		host = "unix://" + dockertest.Socket
	}
	cli, err := containers.NewDockerClient(host)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{
		HostID: "e2e-" + t.Name(), Controller: ctl, Period: 100 * time.Millisecond,
		OOMDeadline: 200 * time.Millisecond, Heartbeat: 200 * time.Millisecond,
		Backend: agent.BackendCgroupfs, Docker: cli, Log: testLog(t),
		// Only this test's containers: other work on the shared engine
		// is never touched.
		Apps: []string{appLabel(t)[containers.AppLabel]},
		// Docker's view within seconds, not escrad's minute: the tests
		// check that it follows, not how long the default waits.
		DockerSync: e2eDockerSync,
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); cli.Close() })
	<-a.Started()
	return a
}

func startPeer(t *testing.T) *peer.Peer {
	t.Helper()
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func appLabel(t *testing.T) map[string]string {
	return map[string]string{containers.AppLabel: "e2e-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")[:min(40, len(t.Name()))]}
}

func cgroupOf(t *testing.T, pid int) cgroups.Paths {
	t.Helper()
	p, err := cgroups.PathsForPID(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func inspectPid(t *testing.T, cli *client.Client, id string) int {
	t.Helper()
	j, err := dockertest.Inspect(context.Background(), cli, id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State.Pid
}

func TestLabelledContainerRegisteredWithinOneSecondUnlabelledNever(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	startAgent(t, "", p.Addr(), nil)
	time.Sleep(300 * time.Millisecond) // session up, initial list done

	lab := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-lab"), Image: img, Cmd: []string{"-idle"}, Labels: appLabel(t)})
	start := time.Now() // docker start returned: the container runs
	reg := p.WaitRegistered(lab, 5*time.Second)
	if reg == nil {
		t.Fatal("labelled container never registered")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("registered %v after docker start returned, want within 1 s", d)
	}
	if reg.App != appLabel(t)[containers.AppLabel] || reg.Handle == 0 {
		t.Errorf("registration %+v", reg)
	}
	unl := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-unl"), Image: img, Cmd: []string{"-idle"}})
	bad := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-bad"), Image: img, Cmd: []string{"-idle"},
		Labels: map[string]string{containers.AppLabel: "has space"}})
	long := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-long"), Image: img, Cmd: []string{"-idle"},
		Labels: map[string]string{containers.AppLabel: strings.Repeat("x", 64)}})
	time.Sleep(1500 * time.Millisecond)
	for _, id := range []string{unl, bad, long} {
		if p.Registered(id) != nil {
			t.Errorf("container %s registered without a valid label", id[:12])
		}
		// Never touched: the kernel OOM killer is still on.
		oc := readFile(t, filepath.Join(cgroupOf(t, inspectPid(t, cli, id)).Memory, "memory.oom_control"))
		if !strings.Contains(oc, "oom_kill_disable 0") {
			t.Errorf("unmanaged container %s has %q", id[:12], oc)
		}
	}
	// Stopping the labelled one unregisters it.
	dockertest.Remove(cli, lab)
	deadline := time.Now().Add(5 * time.Second)
	for !p.Unregistered(lab) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Unregistered(lab) {
		t.Error("removed container never unregistered")
	}
}

func TestControllerLimitsReachCgroupThenDockerInspect(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	startAgent(t, "", p.Addr(), nil)
	// Busy (capped by its quota), so every period has a telemetry record.
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-lim"), Image: img, Cmd: []string{"-for", "60s"}, Labels: appLabel(t),
		Resources: container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, CPUQuota: 50000, CPUPeriod: 100000}})
	reg := p.WaitRegistered(id, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	if reg.Limits.GetCpuQuotaUs() != 50000 || reg.Limits.GetMemoryLimitBytes() != 64<<20 {
		t.Errorf("registered limits %v, want quota 50000 and 64 MiB", reg.Limits)
	}
	paths := cgroupOf(t, inspectPid(t, cli, id))
	ctx, cancel := context.WithTimeout(context.Background(), e2eDockerSync+10*time.Second)
	defer cancel()
	ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: 5, Limits: &pb.Limits{CpuQuotaUs: 23000, MemoryLimitBytes: 96 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ack.Applied) != 1 || ack.Applied[0].Error != "" || ack.Applied[0].Generation != 5 {
		t.Fatalf("ack %v", ack)
	}
	if q := readFile(t, filepath.Join(paths.CPU, "cpu.cfs_quota_us")); q != "23000" {
		t.Errorf("cgroup quota %s right after the ack, want 23000", q)
	}
	if m := readFile(t, filepath.Join(paths.Memory, "memory.limit_in_bytes")); m != strconv.Itoa(96<<20) {
		t.Errorf("cgroup memory limit %s, want %d", m, 96<<20)
	}
	// A stale generation never overwrites a newer one.
	ack, err = p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: 4, Limits: &pb.Limits{CpuQuotaUs: 99000}})
	if err != nil || ack.Applied[0].Error == "" {
		t.Errorf("stale update accepted: %v %v", ack, err)
	}
	if q := readFile(t, filepath.Join(paths.CPU, "cpu.cfs_quota_us")); q != "23000" {
		t.Errorf("stale update wrote quota %s", q)
	}
	// Docker's view follows within the reconciler's window (asynchronous).
	deadline := time.Now().Add(e2eDockerSync + 5*time.Second)
	var hc *container.HostConfig
	for time.Now().Before(deadline) {
		j, err := dockertest.Inspect(ctx, cli, id)
		if err != nil {
			t.Fatal(err)
		}
		hc = j.HostConfig
		if hc.CPUQuota == 23000 && hc.Memory == 96<<20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if hc.CPUQuota != 23000 || hc.Memory != 96<<20 {
		t.Fatalf("docker inspect shows quota %d memory %d, want 23000 and %d", hc.CPUQuota, hc.Memory, 96<<20)
	}
	// And the cgroup still holds the controller's values after Docker's
	// own update ran.
	if q := readFile(t, filepath.Join(paths.CPU, "cpu.cfs_quota_us")); q != "23000" {
		t.Errorf("quota after docker reconcile %s", q)
	}
	// Reclaim (§IV-C): limit -> max(usage, peak since the last reclaim)
	// + δ, never below usage. The peak is the container's so far (v1
	// memory.max_usage_in_bytes; where the file is missing, usage bounds it).
	peak := int64(0)
	if b, err := os.ReadFile(filepath.Join(paths.Memory, "memory.max_usage_in_bytes")); err == nil {
		peak, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	// escrad skips a reclaim while its own docker update that carries
	// the larger limit has not returned (runc could write it back after
	// the controller handed the bytes on); docker inspect can show the new
	// values before that: ask again until the update settled.
	var res *pb.ReclaimResult
	for end := time.Now().Add(e2eDockerSync + 5*time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if res, err = p.Reclaim(ctx, 16<<20, reg.Handle); err != nil {
			t.Fatal(err)
		}
		if len(res.Reclaimed) > 0 || time.Now().After(end) {
			break
		}
	}
	if len(res.Reclaimed) != 1 {
		t.Fatalf("reclaim result %v", res)
	}
	r := res.Reclaimed[0]
	if r.OldLimitBytes != 96<<20 || r.NewLimitBytes < int64(r.UsageBytes)+16<<20 ||
		r.NewLimitBytes > max(int64(r.UsageBytes), peak)+16<<20+1<<20 ||
		r.ReclaimedBytes != uint64(r.OldLimitBytes-r.NewLimitBytes) {
		t.Errorf("reclaimed %v (peak before %d)", r, peak)
	}
	if m := readFile(t, filepath.Join(paths.Memory, "memory.limit_in_bytes")); m != strconv.FormatInt(r.NewLimitBytes, 10) {
		t.Errorf("cgroup memory limit %s after reclaim, want %d", m, r.NewLimitBytes)
	}
	// Telemetry flows for the container.
	deadline = time.Now().Add(3 * time.Second)
	for p.LastCPU(reg.Handle) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := p.LastCPU(reg.Handle); s == nil || s.QuotaUs != 23000 {
		t.Errorf("telemetry record %v, want quota 23000", s)
	}
}

// oomCase runs a memhog that needs 96 MiB in a 32 MiB container under an
// agent talking to ctlAddr, and reports its exit code and the kernel's
// oom_kill count for its cgroup (Docker's OOMKilled flag is not used: on
// v1 it is set by any OOM notification, even one nobody was killed for).
func oomCase(t *testing.T, ctlAddr string, mod func(*agent.Config)) (code int, oomKills uint64, took time.Duration) {
	code, oomKills, took, _ = oomCaseAgent(t, ctlAddr, mod)
	return
}

// oomOutcomes reads the agent's OOM outcome counters.
func oomOutcomes(t *testing.T, a *agent.Agent) map[string]float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "escrad_oom_outcomes_total" {
			continue
		}
		for _, m := range mf.Metric {
			out[m.Label[0].GetValue()] = m.Counter.GetValue()
		}
	}
	return out
}

func oomCaseAgent(t *testing.T, ctlAddr string, mod func(*agent.Config)) (code int, oomKills uint64, took time.Duration, a *agent.Agent) {
	t.Helper()
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	a = startAgent(t, "", ctlAddr, mod)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-hog"), Image: img, Labels: appLabel(t),
		Entrypoint: []string{"/bin/memhog"}, Cmd: []string{"-wait-usr1", "-mib", "96", "-step-mib", "8", "-pause", "50ms", "-hold", "300ms"},
		Resources: container.Resources{Memory: 32 << 20, MemorySwap: 32 << 20}})
	// Allocation starts once the daemon manages the container: a container
	// that outgrows its limit before escrad has seen it meets the kernel's
	// OOM killer as usual (see docs/daemon.md).
	for deadline := time.Now().Add(10 * time.Second); !a.IsManaged(id); {
		if time.Now().After(deadline) {
			t.Fatal("container not managed within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := dockertest.StartHog(context.Background(), cli, id); err != nil {
		t.Fatal(err)
	}
	j, err := dockertest.Inspect(context.Background(), cli, id)
	if err != nil {
		t.Fatal(err)
	}
	var kills uint64
	stop := make(chan struct{})
	polled := make(chan struct{})
	if j.State.Running {
		oc := filepath.Join(cgroupOf(t, j.State.Pid).Memory, "memory.oom_control")
		go func() {
			defer close(polled)
			for {
				if b, err := os.ReadFile(oc); err == nil {
					if v, ok := cgroups.KeyedValue(b, "oom_kill"); ok && v > kills {
						kills = v
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
	} else {
		close(polled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, dockerOOM, err := dockertest.Wait(ctx, cli, id)
	close(stop)
	<-polled
	if err != nil {
		t.Fatalf("container hung or vanished: %v", err)
	}
	if kills == 0 && dockerOOM && code == 137 {
		kills = 1 // killed between two polls
	}
	return code, kills, time.Since(start), a
}

func TestOOMGrantedContainerFinishes(t *testing.T) {
	p := startPeer(t)
	var grants int
	var mu sync.Mutex
	p.OnOOM = func(r *pb.OomRequest) *pb.OomVerdict {
		mu.Lock()
		grants++
		mu.Unlock()
		return &pb.OomVerdict{Handle: r.Handle, Granted: true, NewLimitBytes: int64(r.LimitBytes) + 64<<20}
	}
	code, kills, _ := oomCase(t, p.Addr(), nil)
	if code != 0 || kills != 0 {
		t.Fatalf("exit %d, oom_kill %d; want 0 and 0", code, kills)
	}
	if p.OOMRequests() == 0 {
		t.Fatal("no OOM request reached the controller: the test proved nothing")
	}
}

func TestOOMDeniedContainerKilled(t *testing.T) {
	p := startPeer(t)
	p.OnOOM = func(r *pb.OomRequest) *pb.OomVerdict { return &pb.OomVerdict{Handle: r.Handle, Reason: "pool empty"} }
	code, kills, _ := oomCase(t, p.Addr(), nil)
	if kills == 0 || code != 137 {
		t.Fatalf("exit %d, oom_kill %d; want OOM-killed (137)", code, kills)
	}
	if p.OOMRequests() == 0 {
		t.Fatal("no OOM request reached the controller")
	}
}

func TestOOMSilentControllerKilledAfterDeadline(t *testing.T) {
	p := startPeer(t)
	p.OnOOM = func(*pb.OomRequest) *pb.OomVerdict { return nil } // never answers
	code, kills, took := oomCase(t, p.Addr(), func(c *agent.Config) { c.OOMDeadline = 300 * time.Millisecond })
	if kills == 0 || code != 137 {
		t.Fatalf("exit %d, oom_kill %d; want OOM-killed (137) after the deadline", code, kills)
	}
	if p.OOMRequests() == 0 {
		t.Fatal("no OOM request reached the controller")
	}
	t.Logf("killed %v after start", took)
}

func TestOOMControllerAbsentKilled(t *testing.T) {
	// A port nothing listens on: the daemon cannot reach any controller.
	p := startPeer(t)
	addr := p.Addr()
	p.Close()
	code, kills, _ := oomCase(t, addr, nil)
	if kills == 0 || code != 137 {
		t.Fatalf("exit %d, oom_kill %d; want OOM-killed (137)", code, kills)
	}
}

func TestEngineRestartResubscribes(t *testing.T) {
	dockertest.Client(t, "") // skip without an engine
	eng := dockertest.StartEngine(t, "e2e-restart")
	cli := dockertest.Client(t, eng.Host)
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	startAgent(t, eng.Host, p.Addr(), nil)

	a := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-rs-a"), Image: img, Cmd: []string{"-idle"}, Labels: appLabel(t),
		Resources: container.Resources{CPUQuota: 40000, CPUPeriod: 100000}})
	regA := p.WaitRegistered(a, 5*time.Second)
	if regA == nil {
		t.Fatal("container not registered before the restart")
	}
	if !strings.Contains(regA.CgroupPath, eng.CgroupParent) {
		t.Errorf("cgroup %s not under the engine's --cgroup-parent %s", regA.CgroupPath, eng.CgroupParent)
	}
	eng.Kill()
	time.Sleep(500 * time.Millisecond)
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	b := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-rs-b"), Image: img, Cmd: []string{"-idle"}, Labels: appLabel(t)})
	if p.WaitRegistered(b, 10*time.Second) == nil {
		t.Fatal("container started after the engine restart never registered: no resubscription")
	}
	if p.Unregistered(a) {
		t.Error("container that survived the restart (live-restore) was unregistered")
	}
	// The old container is still managed: limits still apply, and Docker's
	// view is reconciled through the new engine connection.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: regA.Handle, Generation: 1, Limits: &pb.Limits{CpuQuotaUs: 17000}})
	if err != nil || ack.Applied[0].Error != "" {
		t.Fatalf("set limits after restart: %v %v", ack, err)
	}
	paths := cgroupOf(t, inspectPid(t, cli, a))
	if q := readFile(t, filepath.Join(paths.CPU, "cpu.cfs_quota_us")); q != "17000" {
		t.Errorf("quota %s after restart, want 17000", q)
	}
	for {
		j, err := dockertest.Inspect(ctx, cli, a)
		if err != nil {
			t.Fatal(err)
		}
		if j.HostConfig.CPUQuota == 17000 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("docker inspect quota %d, want 17000", j.HostConfig.CPUQuota)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
