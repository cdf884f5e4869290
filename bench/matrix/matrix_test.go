package matrix

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/escra-dev/escra/bench/images"
	"github.com/escra-dev/escra/controller/recommender"
)

func TestCellsAndValidate(t *testing.T) {
	c := Config{Workloads: []string{"demo-http", "nginx", "redis"}, Loads: []string{"burst", "nginx/wrk", "redis-benchmark"},
		Policies: []string{"static15", "autopilot", "vpa10", "escra"}}
	got := c.Cells()
	want := []Cell{{"demo-http", "burst"}, {"nginx", "burst"}, {"nginx", "wrk"}, {"redis", "redis-benchmark"}}
	if len(got) != len(want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cell %d = %v, want %v", i, got[i], want[i])
		}
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []Config{
		{Workloads: []string{"mysql"}, Loads: []string{"fixed"}, Policies: []string{"static15"}},
		{Workloads: []string{"redis"}, Loads: []string{"redis-benchmark"}, Policies: []string{"k8s"}},
		{Workloads: []string{"redis"}, Loads: []string{"fixed"}, Policies: []string{"static15"}},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	r, _ := c.newRecommender("static075", Peak{CPU: 2, Mem: 100})
	if l, _ := r.Recommend(time.Now()); l.CPU != 1.5 || l.MemBytes != 75 {
		t.Errorf("static075 of (2, 100) = %+v", l)
	}
}

// TestMatrixOnTheRealEngine profiles memwave and runs it under static10 for
// a few seconds: the run has slack samples, a series, and the limit the
// profile implies.
func TestMatrixOnTheRealEngine(t *testing.T) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	root, err := images.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := &images.Builder{Docker: cli, RepoRoot: root}
	tag, err := b.Build(ctx, images.Memwave)
	if err != nil {
		t.Fatal(err)
	}
	spin, err := b.Build(ctx, images.Spin)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Docker: cli, Images: map[string]string{images.Memwave.Name: tag, images.Spin.Name: spin}, Workloads: []string{"memwave"},
		Loads: []string{"wave"}, Policies: []string{"static10+batch", "escra"}, Duration: 4 * time.Second, Reps: 1, BasePort: 19900,
		AppCPUs: "0", AppCores: 1}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), "escra-bench-memwave-0", container.RemoveOptions{Force: true})
		cli.ContainerRemove(context.Background(), "escra-bench-batch", container.RemoveOptions{Force: true})
	})
	profiles, err := c.Profile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pk := profiles[Cell{"memwave", "wave"}].Peaks
	if n := len(profiles[Cell{"memwave", "wave"}].CPU[0]); n < 20 {
		t.Fatalf("profile kept %d CPU samples, want the whole series", n)
	}
	// 4 s of a 20 s wave from 32 MiB: the working set passes ~50 MiB.
	if len(pk) != 1 || pk[0].Mem < 40<<20 || pk[0].CPU <= 0 {
		t.Fatalf("peaks %+v", pk)
	}
	runs, notes := c.Run(ctx, profiles)
	if len(runs) != 1 || runs[0].Policy != "static10+batch" {
		t.Fatalf("runs %+v notes %v", runs, notes)
	}
	if len(notes) != 1 { // Escra skipped without processes: said so
		t.Errorf("notes %v", notes)
	}
	r := runs[0]
	if len(r.Slack) < 20 || len(r.Series) < 20 {
		t.Fatalf("%d slack, %d series samples", len(r.Slack), len(r.Series))
	}
	// The reserved figure is static10's limit, and the batch container ran
	// but never above what that reservation leaves of the one app CPU (its
	// quota). How much of that it got depends on what else the machine
	// runs (it is SCHED_IDLE), so only the cap is asserted.
	if lim := min(1, pk[0].CPU); r.ReservedCores < 0.9*lim || r.ReservedCores > 1.1*lim+0.01 {
		t.Errorf("reserved %.3f cores, want static10's limit %.3f", r.ReservedCores, lim)
	}
	if free := 1 - min(1, pk[0].CPU); r.BatchCores <= 0 || r.BatchCores > free+0.05 {
		t.Errorf("batch got %.3f cores, want some and at most the %.3f the limit leaves", r.BatchCores, free)
	}
	last := r.Series[len(r.Series)-1]
	if d := last.MemLimitMiB - pk[0].Mem/(1<<20); d < -0.01 || d > 0.01 {
		t.Errorf("memory limit %v MiB, want the profiled peak %v MiB", last.MemLimitMiB, pk[0].Mem/(1<<20))
	}
}

// The sweep keeps the weights with the least demand above the limit on a
// bursty profile, and a warm recommender decides from the profile at once.
func TestSweepAutopilotAndWarm(t *testing.T) {
	var cpu, mem []float64
	for i := range 600 { // 60 s: 0.1 core, bursts of 0.6 core for 3 s every 10 s
		u := 0.1
		if i%100 >= 70 {
			u = 0.6
		}
		cpu, mem = append(cpu, u), append(mem, 50<<20)
	}
	profiles := map[Cell]Profile{{"x", "burst"}: {Peaks: []Peak{{CPU: 0.6, Mem: 50 << 20}}, CPU: [][]float64{cpu}, Mem: [][]float64{mem}}}
	ch := SweepAutopilot(profiles)
	if ch.Tried != 27 {
		t.Fatalf("tried %d weight sets", ch.Tried)
	}
	dflt, _ := scoreAutopilot(recommender.DefaultAutopilotCPU(), profiles)
	if ch.OverrunCoreS > dflt {
		t.Fatalf("chosen weights overrun %.3f core·s, defaults %.3f", ch.OverrunCoreS, dflt)
	}
	c := Config{AutopilotCPU: &ch.CPU}
	r, _ := c.newRecommender("autopilot", Peak{})
	now := time.Now()
	warm(r, cpu, mem, now)
	l, ok := r.Recommend(now)
	if !ok || l.CPU < 0.6 {
		t.Fatalf("warm autopilot recommends %+v (ok %v), want at least the profiled burst of 0.6 core", l, ok)
	}
}
