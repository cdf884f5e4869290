package daemon_test

// PEMA on the real engine: the pema policy (PEMA) of the real
// controller, through a real escrad, on three real demo-http containers,
// with latency from the policy's own reverse proxy. Behaviour, counted in
// PEMA intervals, never in seconds: it cuts CPU while the SLO holds, the
// cuts reach the cgroups, and a violation (the SLO tightened, Fig 20) is
// answered by a rollback to more CPU.

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

func TestPEMACutsCPUWhileSLOHoldsThenRollsBackOnViolation(t *testing.T) {
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
	const interval = 2 * time.Second
	s := startController(t, server.AppSpec{Name: appName, CPUCores: 1.5, MemoryBytes: 512 << 20, Sigma: 0.1, Policy: "pema",
		SLO: &adminapi.SLO{P95: time.Second, Interval: interval, MinRequests: 100, Listen: "127.0.0.1:0",
			Upstream: fmt.Sprintf("127.0.0.1:%d", ports["front"]), Exploration: "none", Seed: 1}})
	startAgent(t, "", s.TCPAddr(), nil)
	labels := map[string]string{dockertest.TestLabel: "1"}
	for k, v := range label {
		labels[k] = v
	}
	run, err := pemaapp.Start(ctx, cli, img, dockertest.UniqueName("pema-e2e"), labels, svcs, 0.5, ports)
	if run != nil {
		t.Cleanup(run.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	loop := s.PEMALoop(appName)
	if loop == nil {
		t.Fatal("no pema loop for the app")
	}

	// The SLO is set from what this machine gives at the ample start:
	// 4 × the p95 of a short run straight at the front service.
	base := &pemaapp.Client{URL: fmt.Sprintf("http://%s/chain?ms=2", run.Entry()), Rate: func(time.Duration) float64 { return 100 }, Seed: 1}
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	base.Run(bctx)
	bcancel()
	var lat []time.Duration
	for _, x := range base.Samples() {
		lat = append(lat, x.Latency)
	}
	slo := max(4*pemaapp.P95(lat), 30*time.Millisecond)
	if err := loop.SetSLO(slo.Seconds()); err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline p95 %v → SLO %v", pemaapp.P95(lat), slo)
	cl := &pemaapp.Client{URL: "http://" + loop.ProxyAddr() + "/chain?ms=2", Rate: func(time.Duration) float64 { return 100 }, Seed: 2}
	go cl.Run(ctx)

	steps := func() []pemaloop.Record {
		var out []pemaloop.Record
		for _, r := range loop.Records() {
			if r.Kind != "" {
				out = append(out, r)
			}
		}
		return out
	}
	// waitSteps waits for n PEMA steps; the bound only keeps a broken
	// run from hanging (a step is one interval).
	waitSteps := func(n int) []pemaloop.Record {
		limit := time.Now().Add(time.Duration(n+4) * interval * 2)
		for {
			st := steps()
			if len(st) >= n {
				return st
			}
			if time.Now().After(limit) {
				t.Fatalf("%d PEMA steps, want %d; records: %+v", len(st), n, loop.Records())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// 1. Within 8 steps PEMA has cut, and an allocation below the start
	// held the SLO.
	var held *pemaloop.Record
	for n := 1; n <= 8 && held == nil; n++ {
		st := waitSteps(n)
		for i := 1; i < len(st); i++ {
			if st[i-1].Kind == pema.KindCut && !st[i].Violate && st[i-1].TotalCPU < 1.5-0.05 {
				r := st[i-1]
				held = &r
				break
			}
		}
	}
	if held == nil {
		t.Fatalf("no cut held the SLO in 8 steps: %+v", steps())
	}
	t.Logf("cut to %.2f cores, SLO held", held.TotalCPU)

	// The cuts reach the containers' cgroups.
	last := steps()[len(steps())-1]
	want := map[string]int64{}
	for _, name := range run.Names {
		want[name] = int64(last.X[name] * 100000)
	}
	checkQuotas := func(want map[string]int64) {
		t.Helper()
		limit := time.Now().Add(interval)
		for {
			bad := ""
			for i, id := range run.IDs {
				q, _ := strconv.ParseInt(readFile(t, filepath.Join(cgroupOf(t, inspectPid(t, cli, id)).CPU, "cpu.cfs_quota_us")), 10, 64)
				w := want[run.Names[i]]
				if d := q - w; d > 200 || d < -200 {
					bad += fmt.Sprintf(" %s: cgroup %d, PEMA %d;", run.Names[i], q, w)
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(limit) {
				t.Fatalf("quotas not applied within an interval:%s", bad)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if last.Kind != pema.KindRollback {
		checkQuotas(want)
	}

	// 2. The SLO drops under what any allocation gives: the next step
	// sees a violation and rolls back to more CPU. 1 ms is below the
	// chain's own CPU time (front 1 ms, then a 2 ms), so the interval
	// violates however loaded the machine is (a quarter of the last p95
	// did not: under two busy loops one interval read 340 ms, the next
	// ones 23–31 ms).
	n := len(steps())
	const tight = 0.001
	if err := loop.SetSLO(tight); err != nil {
		t.Fatal(err)
	}
	var rb *pemaloop.Record
	inForce := 0.0 // the allocation the violating interval ran with
	for k := n + 1; k <= n+3 && rb == nil; k++ {
		st := waitSteps(k)
		if r := st[k-1]; r.Violate {
			rb, inForce = &r, st[k-2].TotalCPU
		}
	}
	if rb == nil {
		t.Fatalf("no violation after the SLO was cut to %.1f ms: %+v", tight*1000, steps()[n:])
	}
	// More CPU than the violating allocation (unless that was already the
	// ample start, which nothing exceeds).
	if rb.Kind != pema.KindRollback || !(rb.TotalCPU > inForce || inForce >= 1.5-0.01 && rb.TotalCPU >= inForce-0.01) {
		t.Fatalf("violation at %.2f cores answered by %s to %.2f cores", inForce, rb.Kind, rb.TotalCPU)
	}
	want = map[string]int64{}
	for _, name := range run.Names {
		want[name] = int64(rb.X[name] * 100000)
	}
	checkQuotas(want)
}
