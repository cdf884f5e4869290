package matrix

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/escra-dev/escra/bench/images"
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
	r, _ := newRecommender("static075", Peak{CPU: 2, Mem: 100})
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
	tag, err := (&images.Builder{Docker: cli, RepoRoot: root}).Build(ctx, images.Memwave)
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Docker: cli, Images: map[string]string{images.Memwave.Name: tag}, Workloads: []string{"memwave"},
		Loads: []string{"wave"}, Policies: []string{"static10", "escra"}, Duration: 4 * time.Second, Reps: 1, BasePort: 19900}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), "escra-bench-memwave-0", container.RemoveOptions{Force: true})
	})
	peaks, err := c.Profile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pk := peaks[Cell{"memwave", "wave"}]
	// 4 s of a 20 s wave from 32 MiB: the working set passes ~50 MiB.
	if len(pk) != 1 || pk[0].Mem < 40<<20 || pk[0].CPU <= 0 {
		t.Fatalf("peaks %+v", pk)
	}
	runs, notes := c.Run(ctx, peaks)
	if len(runs) != 1 || runs[0].Policy != "static10" {
		t.Fatalf("runs %+v notes %v", runs, notes)
	}
	if len(notes) != 1 { // Escra skipped without processes: said so
		t.Errorf("notes %v", notes)
	}
	r := runs[0]
	if len(r.Slack) < 20 || len(r.Series) < 20 {
		t.Fatalf("%d slack, %d series samples", len(r.Slack), len(r.Series))
	}
	last := r.Series[len(r.Series)-1]
	if d := last.MemLimitMiB - pk[0].Mem/(1<<20); d < -0.01 || d > 0.01 {
		t.Errorf("memory limit %v MiB, want the profiled peak %v MiB", last.MemLimitMiB, pk[0].Mem/(1<<20))
	}
}
