package matrix

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/recommender"
	"github.com/escra-dev/escra/internal/procstat"
	"github.com/escra-dev/escra/internal/workloadimages"
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

// TestBatchOnlyWhereThereIsAClient: memwave (no client) skips the batch
// variants, cells with a client run every policy, and nginx gets one
// worker per app CPU.
func TestBatchOnlyWhereThereIsAClient(t *testing.T) {
	c := Config{Policies: []string{"static15", "static15+batch", "escra", "escra+batch"}, AppCores: 1}
	if got := c.cellPolicies(Cell{"memwave", "wave"}); len(got) != 2 || got[0] != "static15" || got[1] != "escra" {
		t.Errorf("memwave runs %v, want [static15 escra]", got)
	}
	if got := c.cellPolicies(Cell{"nginx", "wrk"}); len(got) != 4 {
		t.Errorf("nginx/wrk runs %v, want all four", got)
	}
	w, _ := WorkloadByName("nginx")
	if cmd := w.Cmd(0, 8081, c.appCPUCount()); cmd[len(cmd)-2] != "-workers" || cmd[len(cmd)-1] != "1" {
		t.Errorf("nginx command %v, want -workers 1 on one app CPU", cmd)
	}
}

// engineWith connects to the real engine (closed when the test ends) and
// builds the images, returning their tags by image name.
func engineWith(ctx context.Context, t *testing.T, specs ...workloadimages.Spec) (*client.Client, map[string]string) {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	b := &workloadimages.Builder{Docker: cli, RepoRoot: root}
	tags := map[string]string{}
	for _, sp := range specs {
		if tags[sp.Name], err = b.Build(ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	return cli, tags
}

// TestMatrixOnTheRealEngine profiles memwave and runs it under static10 for
// a few seconds: the run has slack samples, a series, and the limit the
// profile implies.
func TestMatrixOnTheRealEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli, tags := engineWith(ctx, t, workloadimages.Memwave, workloadimages.Spin)
	// memwave as if it had a client, so the matrix runs its +batch variant.
	w, _ := WorkloadByName("memwave")
	w.Name, w.NoClient = "memwave-batch", false
	Workloads = append(Workloads, w)
	t.Cleanup(func() { Workloads = Workloads[:len(Workloads)-1] })
	c := Config{Docker: cli, Images: tags, Workloads: []string{w.Name},
		Loads: []string{"wave"}, Policies: []string{"static10+batch", "static10", "escra"}, Duration: 4 * time.Second, Reps: 1, BasePort: 19900,
		AppCPUs: "0", AppCores: 1}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), "escra-bench-"+w.Name+"-0", client.ContainerRemoveOptions{Force: true})
		cli.ContainerRemove(context.Background(), "escra-bench-batch", client.ContainerRemoveOptions{Force: true})
	})
	cell := Cell{w.Name, "wave"}
	profiles, err := c.Profile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pk := profiles[cell].Peaks
	if n := len(profiles[cell].CPU[0]); n < 20 {
		t.Fatalf("profile kept %d CPU samples, want the whole series", n)
	}
	// 4 s of a 20 s wave from 32 MiB: the working set passes ~50 MiB.
	if len(pk) != 1 || pk[0].Mem < 40<<20 || pk[0].CPU <= 0 {
		t.Fatalf("peaks %+v", pk)
	}
	runs, notes := c.Run(ctx, profiles)
	if len(runs) != 2 {
		t.Fatalf("runs %+v notes %v", runs, notes)
	}
	if len(notes) != 1 { // Escra skipped without processes: said so
		t.Errorf("notes %v", notes)
	}
	if _, err := cli.ContainerInspect(ctx, "escra-bench-batch", client.ContainerInspectOptions{}); err == nil {
		t.Error("the batch container outlived the matrix")
	}
	r := runs[0]
	if r.Policy != "static10+batch" {
		r = runs[1]
	}
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

// TestBatchSuspendedBetweenRuns: the matrix's batch container spins while
// a +batch run has it, takes no CPU at all while suspended (the plain runs
// between), and spins again when resumed.
func TestBatchSuspendedBetweenRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, tags := engineWith(ctx, t, workloadimages.Spin)
	c := Config{Docker: cli, Images: tags, AppCPUs: "0", AppCores: 1, batch: &batchHolder{}}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), "escra-bench-batch", client.ContainerRemoveOptions{Force: true})
	})
	spun := func(b *batchRun) uint64 {
		u0 := b.usageNs()
		time.Sleep(time.Second)
		return b.usageNs() - u0
	}
	for round := range 2 {
		b, err := c.resumeBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.follow(ctx, 0.5)
		if ns := spun(b); ns == 0 {
			t.Fatalf("round %d: the resumed batch container used no CPU in 1 s", round)
		}
		b.suspend(ctx)
		if c.batch.b != b {
			t.Fatalf("round %d: suspend dropped the container", round)
		}
		// A stop takes effect when each thread next runs: for a throttled
		// SCHED_IDLE spinner, up to a period or more after the signal.
		in, err := cli.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); !allStopped(t, in.Container.State.Pid); {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the batch container's threads are not all stopped 10 s after suspend", round)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if ns := spun(b); ns != 0 {
			t.Errorf("round %d: the suspended batch container used %d ns of CPU in 1 s", round, ns)
		}
	}
	c.batch.b.close()
	if _, err := cli.ContainerInspect(ctx, "escra-bench-batch", client.ContainerInspectOptions{}); err == nil {
		t.Error("the batch container is still there after close")
	}
}

// allStopped: every thread of pid is in group stop (state T).
func allStopped(t *testing.T, pid int) bool {
	tasks, err := procstat.Threads(pid)
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	for _, s := range tasks {
		if s.State != 'T' {
			return false
		}
	}
	return true
}

// burstProfile is one replica's profile of n 100 ms samples: calm, then
// from sample burstFrom of every cycle a burst.
func burstProfile(c Cell, n, cycle, burstFrom int, calm, burst, memBytes float64) (map[Cell]Profile, []float64, []float64) {
	var cpu, mem []float64
	for i := range n {
		u := calm
		if i%cycle >= burstFrom {
			u = burst
		}
		cpu, mem = append(cpu, u), append(mem, memBytes)
	}
	return map[Cell]Profile{c: {Peaks: []Peak{{CPU: burst, Mem: memBytes}}, CPU: [][]float64{cpu}, Mem: [][]float64{mem}}}, cpu, mem
}

// The sweep scores weights as a live container would meet them: usage
// capped by the limit, the rest waiting. A weight set that cuts a chain
// hop to its calm usage between bursts then sees only its own cap and
// starves the bursts (run O chose D = 0.8 on an uncapped replay, where it
// tied with 0.95); the sweep must rank it far below the chosen weights.
func TestSweepAutopilotSeesItsOwnCap(t *testing.T) {
	// 18 s: 3 s calm at 0.02 core, 3 s burst at 0.25.
	profiles, _, _ := burstProfile(Cell{"chain", "burst"}, 180, 60, 30, 0.02, 0.25, 16<<20)
	ch := SweepAutopilot(profiles)
	burstWork := 0.25 * 9 // core·s of burst demand in the scored pass
	if ch.OverrunCoreS > 0.05*burstWork {
		t.Fatalf("chosen weights %s leave %.2f core·s waiting of %.2f of burst work", ch, ch.OverrunCoreS, burstWork)
	}
	cut := recommender.DefaultAutopilotCPU()
	cut.Wo, cut.D, cut.WDelta, cut.WSwitch = 1, 0.5, 0.5, 0.5
	over, _ := scoreAutopilot(cut, profiles)
	// Seeing only its cap, it never catches up: the demand waiting above
	// its limit, summed over the run, exceeds all the bursts' work (an
	// uncapped replay scored 1.2 core·s, the first second of each burst).
	if over < burstWork {
		t.Fatalf("weights that cut to the calm level leave %.2f core·s waiting (chosen: %.2f); a replay that caps usage at the limit leaves more than the bursts' %.2f", over, ch.OverrunCoreS, burstWork)
	}
}

// The sweep keeps the weights with the least demand above the limit on a
// bursty profile, and a warm recommender decides from the profile at once.
func TestSweepAutopilotAndWarm(t *testing.T) {
	// 60 s: 0.1 core, bursts of 0.6 core for 3 s every 10 s.
	profiles, cpu, mem := burstProfile(Cell{"x", "burst"}, 600, 100, 70, 0.1, 0.6, 50<<20)
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
