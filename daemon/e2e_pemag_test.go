package daemon_test

// pema-guarded on the real engine: a violation inside a PEMA interval
// is seen by the policy's sliding p95 and answered by a rollback that
// reaches the containers' cgroups within 2 s, long before the
// interval's end (PEMA §6: "catching the SLO violations early").

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/pema"
	"github.com/escra-dev/escra/controller/pemaloop"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/pemaapp"
	"github.com/escra-dev/escra/internal/workloadimages"
)

func TestPEMAGuardedRollsBackInsideTheInterval(t *testing.T) {
	cli := dockertest.Client(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	img, err := (&workloadimages.Builder{Docker: cli, RepoRoot: dockertest.RepoRoot()}).Build(ctx, workloadimages.DemoHTTP)
	if err != nil {
		t.Fatal(err)
	}
	svcs := pemaapp.ThreeServices()
	ports, err := pemaapp.AssignPorts(svcs)
	if err != nil {
		t.Fatal(err)
	}
	label := appLabel(t)
	appName := label[containers.AppLabel]
	// An interval far longer than the test: every step below is taken by
	// hand (Tick), and a rollback the loop takes by itself is the guard's.
	const interval = 5 * time.Minute
	s := startController(t, server.AppSpec{Name: appName, CPUCores: 1.5, MemoryBytes: 512 << 20, Sigma: 0.1, Policy: "pema-guarded",
		SLO: &adminapi.SLO{P95: 2 * time.Second, Interval: interval, MinRequests: 50, Listen: "127.0.0.1:0",
			Upstream: fmt.Sprintf("127.0.0.1:%d", ports["front"]), Exploration: "none", Seed: 1}})
	startAgent(t, "", s.TCPAddr(), nil)
	labels := map[string]string{dockertest.TestLabel: "1"}
	for k, v := range label {
		labels[k] = v
	}
	run, err := pemaapp.Start(ctx, cli, img, dockertest.UniqueName("pemag-e2e"), labels, svcs, 0.5, ports)
	if run != nil {
		t.Cleanup(run.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	loop := s.PEMALoop(appName)
	if loop == nil {
		t.Fatal("no pema-guarded loop for the app")
	}
	cl := &pemaapp.Client{URL: "http://" + loop.ProxyAddr() + "/chain?ms=2", Rate: func(time.Duration) float64 { return 100 }, Seed: 2}
	go cl.Run(ctx)

	last := func() pemaloop.Record {
		rs := loop.Records()
		if len(rs) == 0 {
			return pemaloop.Record{}
		}
		return rs[len(rs)-1]
	}
	// PEMA starts from the members' quotas once all three have joined.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		loop.Tick()
		if r := last(); r.Skipped == "started" && len(r.X) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PEMA did not start: %+v", loop.Records())
		}
	}
	// One step under a loose SLO: a cut.
	time.Sleep(1500 * time.Millisecond)
	loop.Tick()
	cut := last()
	if cut.Kind != pema.KindCut || !(cut.TotalCPU < 1.5-0.01) {
		t.Fatalf("first step %+v: want a cut below 1.5 cores", cut)
	}
	quotas := func(x map[string]float64, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			bad := ""
			for i, id := range run.IDs {
				q, _ := strconv.ParseInt(readFile(t, filepath.Join(cgroupOf(t, inspectPid(t, cli, id)).CPU, "cpu.cfs_quota_us")), 10, 64)
				if w := int64(x[run.Names[i]] * 100000); q-w > 200 || w-q > 200 {
					bad += fmt.Sprintf(" %s: cgroup %d, PEMA %d;", run.Names[i], q, w)
				}
			}
			if bad == "" {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("quotas not applied within %v:%s", within, bad)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	quotas(cut.X, 5*time.Second)
	time.Sleep(time.Second) // the sliding window holds the cut's requests only

	// The SLO drops under what any allocation gives (1 ms: the chain's own
	// CPU time is more), in the middle of a five-minute interval.
	t0 := time.Now()
	if err := loop.SetSLO(0.001); err != nil {
		t.Fatal(err)
	}
	var rb pemaloop.Record
	for rb.Kind == "" {
		for _, r := range loop.Records() {
			if r.Fast && r.Time.After(t0) {
				rb = r
				break
			}
		}
		if time.Since(t0) > 2*time.Second {
			t.Fatalf("no rollback within 2 s of the violation: %+v", loop.Records())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rb.Kind != pema.KindRollback || !rb.Violate || !(rb.TotalCPU > cut.TotalCPU) || rb.Requests < pemaloop.DefaultFastMin {
		t.Fatalf("inside the interval: %+v after the cut to %.3f cores; want a rollback to more CPU on %d+ requests", rb, cut.TotalCPU, pemaloop.DefaultFastMin)
	}
	applied := quotas(rb.X, 2*time.Second-time.Since(t0))
	t.Logf("violation (p95 %.1f ms over %d requests) rolled back %v after the SLO change, in the cgroups %v later: %.3f → %.3f cores",
		rb.P95*1000, rb.Requests, rb.Time.Sub(t0).Round(time.Millisecond), applied.Round(time.Millisecond), cut.TotalCPU, rb.TotalCPU)
}
