package daemon_test

// Recommend mode on the real engine: escractl applies an app with
// mode: recommend, the real controller decides every period from real
// telemetry and shows the results, and no cgroup file of its containers
// changes; applying the same spec in enforce mode moves a limit.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

func TestRecommendModeChangesNoCgroupUntilEnforced(t *testing.T) {
	// escractl builds while the engine and the controller start.
	bin := t.TempDir()
	built := make(chan error, 1)
	go func() { built <- dockertest.BuildBinaries(bin, "./controller/cmd/escractl") }()
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = time.Second // reclaim runs, on the books only
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "escractl"), append([]string{"--controller", "http://" + s.AdminAddr()}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("escractl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	app := appLabel(t)[containers.AppLabel]
	specFile := filepath.Join(t.TempDir(), "trial.yaml")
	writeSpec := func(mode string) {
		if err := os.WriteFile(specFile, []byte("name: "+app+"\ncpu: 1\nmemory: 512MiB\nmode: "+mode+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeSpec("recommend")
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	ctl("apply", "-f", specFile)
	startAgent(t, "", s.TCPAddr(), nil)

	// The user's own limits: 1.5 cores and 200 MiB each, for an app
	// budget of one core. One container spins on two threads, the other
	// works 2 % of the time (an idle group sends no records at all).
	res := container.Resources{CPUQuota: 150000, CPUPeriod: 100000, Memory: 200 << 20, MemorySwap: 200 << 20}
	busy := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-rec-busy"), Image: img,
		Cmd: []string{"-threads", "2"}, Labels: appLabel(t), Resources: res})
	idle := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-rec-idle"), Image: img,
		Cmd: []string{"-duty", "0.02"}, Labels: appLabel(t), Resources: res})
	files := map[string]string{}
	for _, id := range []string{busy, idle} {
		p := cgroupOf(t, inspectPid(t, cli, id))
		files[filepath.Join(p.CPU, "cpu.cfs_quota_us")] = "150000"
		files[filepath.Join(p.Memory, "memory.limit_in_bytes")] = "209715200"
	}
	for f, want := range files {
		if got := readFile(t, f); got != want {
			t.Fatalf("%s holds %s before the trial, want Docker's %s", f, got, want)
		}
	}
	start := time.Now()
	for member(s, busy) == nil || member(s, idle) == nil {
		if time.Since(start) > 2*time.Second {
			t.Fatal("labelled containers not registered within 2 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// 30 s of load: the cgroup files never change.
	for time.Since(start) < 30*time.Second {
		for f, want := range files {
			if got := readFile(t, f); got != want {
				t.Fatalf("after %s in recommend mode %s holds %s, was %s", time.Since(start).Round(time.Millisecond), f, got, want)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	b, i := member(s, busy), member(s, idle)
	t.Logf("recommended: busy %.2f cores %d B (holds %d µs), idle %.2f cores %d B", b.RecommendedCPUCores,
		b.RecommendedMemoryBytes, b.CPUQuotaUs, i.RecommendedCPUCores, i.RecommendedMemoryBytes)
	// Decided every period within the one-core budget: the spinning
	// container is recommended more than the light one (how much depends
	// on the CPU the shared host lets it have), memory near usage + δ.
	if b.Generation < 3 || b.RecommendedCPUCores <= i.RecommendedCPUCores || i.RecommendedCPUCores <= 0 ||
		b.RecommendedCPUCores+i.RecommendedCPUCores > 1+1e-6 || b.RecommendedMemoryBytes == 0 || i.RecommendedMemoryBytes == 0 ||
		b.RecommendedMemoryBytes+i.RecommendedMemoryBytes > 512<<20 {
		t.Fatalf("recommendations busy %+v idle %+v", b, i)
	}
	if b.CPUQuotaUs != 150000 || b.MemoryLimitBytes != 200<<20 {
		t.Fatalf("status shows limits %d µs %d B, want the cgroup's own", b.CPUQuotaUs, b.MemoryLimitBytes)
	}
	wide := ctl("get", "apps", app, "-o", "wide")
	if !strings.Contains(wide, "RECOMMENDED") || !strings.Contains(wide, "recommend") || strings.Contains(wide, "recommend  -") {
		t.Fatalf("escractl get apps -o wide:\n%s", wide)
	}
	t.Logf("escractl get apps -o wide:\n%s", wide)

	// One apply of the same spec in enforce mode: the busy container's
	// quota moves to its recommendation.
	quota := filepath.Join(cgroupOf(t, inspectPid(t, cli, busy)).CPU, "cpu.cfs_quota_us")
	writeSpec("enforce")
	applied := time.Now()
	ctl("apply", "-f", specFile)
	deadline := applied.Add(5 * time.Second)
	for readFile(t, quota) == "150000" {
		if time.Now().After(deadline) {
			t.Fatal("busy container's quota still Docker's 5 s after enforce")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("enforced within %s of escractl apply: busy quota %s µs", time.Since(applied).Round(time.Millisecond), readFile(t, quota))
}

// An OOM request in recommend mode is answered as Docker would be without
// Escra: denied, and the kernel acts at the container's own limit. The
// same app enforcing grants it (TestRealControllerGrantsMemoryHogFinishes).
func TestRecommendModeDeniesOOMAtTheContainersOwnLimit(t *testing.T) {
	s := startController(t, server.AppSpec{Name: appLabel(t)[containers.AppLabel], CPUCores: 1, MemoryBytes: 256 << 20,
		Sigma: 0.875, Mode: "recommend"})
	code, kills, _, a := oomCaseAgent(t, s.TCPAddr(), verdictNotDeadline)
	if kills == 0 || code != 137 {
		t.Fatalf("exit %d, oom_kill %d; want OOM-killed at its own 32 MiB", code, kills)
	}
	if o := oomOutcomes(t, a); o["denied"] == 0 || o["granted"] != 0 {
		t.Fatalf("outcomes %v: want denials only", o)
	}
}
