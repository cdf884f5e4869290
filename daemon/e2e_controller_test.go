package daemon_test

// The acceptance path with the REAL controller (controller/server) on
// loopback, the real engine and real cgroups: nothing scripted.

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

func startController(t *testing.T, apps ...server.AppSpec) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.ReclaimEvery = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if testingVerbose() {
		cfg.Logger = testLog(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	for _, a := range apps {
		if err := s.DefineApp(a); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func testingVerbose() bool { return testing.Verbose() }

func member(s *server.Server, id string) *server.ContainerState {
	for _, c := range s.Snapshot().Containers {
		if c.ContainerID == id {
			c := c
			return &c
		}
	}
	return nil
}

// handleOf is the agent's handle of container id.
func handleOf(t *testing.T, a *agent.Agent, id string) uint32 {
	t.Helper()
	for h, cid := range a.Managed() {
		if cid == id {
			return h
		}
	}
	t.Fatalf("container %s not managed", id)
	return 0
}

func TestRealControllerRegistersAndItsQuotaReachesCgroupThenDocker(t *testing.T) {
	quotaReachesCgroupThenDocker(t, container.Resources{CPUQuota: 150000, CPUPeriod: 100000, Memory: 200 << 20, MemorySwap: 200 << 20},
		func(hc *container.HostConfig) int64 { return hc.CPUQuota })
}

// A container created with `docker run --cpus` (NanoCPUs): Docker refuses
// CpuQuota/CpuPeriod updates for it, so its view must follow as NanoCPUs.
func TestQuotaReachesDockerForACpusContainer(t *testing.T) {
	quotaReachesCgroupThenDocker(t, container.Resources{NanoCPUs: 1_500_000_000, Memory: 200 << 20, MemorySwap: 200 << 20},
		func(hc *container.HostConfig) int64 {
			if hc.CPUQuota != 0 {
				t.Fatalf("docker inspect shows CpuQuota %d beside NanoCPUs %d", hc.CPUQuota, hc.NanoCPUs)
			}
			return hc.NanoCPUs * 100000 / 1e9
		})
}

// quotaReachesCgroupThenDocker starts a labelled container with res (1.5
// cores), checks that the controller's quota replaces it in the cgroup,
// then that docker inspect (read by dockerQuota, in µs per 100 ms) follows.
func quotaReachesCgroupThenDocker(t *testing.T, res container.Resources, dockerQuota func(*container.HostConfig) int64) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	app := appLabel(t)[containers.AppLabel]
	s := startController(t, server.AppSpec{Name: app, CPUCores: 0.3, MemoryBytes: 256 << 20, Sigma: 0.5})
	startAgent(t, "", s.TCPAddr(), nil)
	time.Sleep(300 * time.Millisecond)

	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-rc"), Image: img, Cmd: []string{"-idle"}, Labels: appLabel(t),
		Resources: res})
	start := time.Now()
	for member(s, id) == nil {
		if time.Since(start) > time.Second {
			t.Fatal("labelled container not registered with the controller within 1 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	paths := cgroupOf(t, inspectPid(t, cli, id))
	quotaFile := filepath.Join(paths.CPU, "cpu.cfs_quota_us")
	// The controller's bootstrap (eq. 2: 0.3 cores for the app's one
	// container) and later decisions replace Docker's 1.5 cores.
	deadline := time.Now().Add(5 * time.Second)
	var cg int64
	for {
		m := member(s, id)
		cg, _ = strconv.ParseInt(readFile(t, quotaFile), 10, 64)
		if m != nil && m.CPUQuotaUs > 0 && cg == m.CPUQuotaUs && cg != 150000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup quota %d, controller's %v", cg, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cg > 30000 {
		t.Errorf("quota %d above the app's 0.3-core budget", cg)
	}
	// Docker's view follows within the reconciler's window: docker inspect
	// shows what the cgroup holds.
	deadline = time.Now().Add(e2eDockerSync + 5*time.Second)
	for {
		j, err := dockertest.Inspect(context.Background(), cli, id)
		if err != nil {
			t.Fatal(err)
		}
		cg, _ = strconv.ParseInt(readFile(t, quotaFile), 10, 64)
		if dockerQuota(j.HostConfig) == cg {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker inspect quota %d, cgroup %d", dockerQuota(j.HostConfig), cg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// verdictNotDeadline gives the controller 2 s to answer: these tests are
// about its verdict, and on a loaded machine a round trip can outlast the
// 200 ms default deadline (whose expiry the controller-absent and
// silent-controller tests cover).
func verdictNotDeadline(c *agent.Config) { c.OOMDeadline = 2 * time.Second }

func TestRealControllerGrantsMemoryHogFinishes(t *testing.T) {
	// Bootstrap gives the one container 256 MiB × (1 − 0.875) = 32 MiB and
	// keeps 224 MiB for OOM grants of 64 MiB.
	s := startController(t, server.AppSpec{Name: appLabel(t)[containers.AppLabel], CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.875})
	code, kills, _, a := oomCaseAgent(t, s.TCPAddr(), verdictNotDeadline)
	if code != 0 || kills != 0 {
		t.Fatalf("exit %d, oom_kill %d; want 0 and 0 (granted)", code, kills)
	}
	if o := oomOutcomes(t, a); o["granted"] == 0 {
		t.Fatalf("no OOM was granted (outcomes %v): the hog never hit its limit", o)
	}
}

func TestRealControllerDeniesWhenPoolEmptyKilled(t *testing.T) {
	// 40 MiB for the whole app: at most one 8 MiB grant, the hog needs 96.
	s := startController(t, server.AppSpec{Name: appLabel(t)[containers.AppLabel], CPUCores: 1, MemoryBytes: 40 << 20, Sigma: 0.2})
	code, kills, _, a := oomCaseAgent(t, s.TCPAddr(), verdictNotDeadline)
	if kills == 0 || code != 137 {
		t.Fatalf("exit %d, oom_kill %d; want OOM-killed after the denial", code, kills)
	}
	if o := oomOutcomes(t, a); o["denied"] == 0 {
		t.Fatalf("outcomes %v: the controller never denied", o)
	}
}
