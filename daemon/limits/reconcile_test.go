package limits

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// A container created with --cpus only takes NanoCPUs from docker update
// ("Conflicting options: CPU Period cannot be updated as NanoCPUs has
// already been set"): the reconciler must never send CpuQuota/CpuPeriod
// for it, or it retries forever and Docker's view never follows.
func TestDockerCPUKeepsTheFormTheContainerWasCreatedWith(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cur          Current
		nano         bool
		quota        int64
		period, cpus int64
	}{
		{"quota form", Current{CPUQuotaUs: 30000, CPUPeriodUs: 100000}, false, 30000, 100000, 0},
		{"quota form, unlimited", Current{CPUQuotaUs: -1, CPUPeriodUs: 100000}, false, -1, 100000, 0},
		{"--cpus, Docker's period", Current{CPUQuotaUs: 30000, CPUPeriodUs: 100000}, true, 0, 0, 300_000_000},
		{"--cpus, sub-core quota", Current{CPUQuotaUs: 5000, CPUPeriodUs: 100000}, true, 0, 0, 50_000_000},
		{"--cpus, another period: CPU left out", Current{CPUQuotaUs: 30000, CPUPeriodUs: 50000}, true, 0, 0, 0},
		{"--cpus, unlimited: CPU left out", Current{CPUQuotaUs: -1, CPUPeriodUs: 100000}, true, 0, 0, 0},
	} {
		var res container.Resources
		dockerCPU(&res, tc.cur, tc.nano)
		if res.CPUQuota != tc.quota || res.CPUPeriod != tc.period || res.NanoCPUs != tc.cpus {
			t.Errorf("%s: quota %d period %d nano %d, want %d %d %d", tc.name,
				res.CPUQuota, res.CPUPeriod, res.NanoCPUs, tc.quota, tc.period, tc.cpus)
		}
		if res.NanoCPUs != 0 && (res.CPUQuota != 0 || res.CPUPeriod != 0) {
			t.Errorf("%s: NanoCPUs sent with CpuQuota/CpuPeriod: Docker refuses that", tc.name)
		}
	}
}

// runcDocker stands in for the Docker client in the reconciler's unit test:
// each update waits for release, then writes the CPU quota it carries into
// the cgroup as runc would, late (as in the soak test: a hung engine served an
// update after escrad's newer cut).
type runcDocker struct {
	rel     string
	started chan container.Resources
	release chan error
}

func (d *runcDocker) ContainerUpdate(ctx context.Context, _ string, cfg client.ContainerUpdateOptions) (client.ContainerUpdateResult, error) {
	d.started <- *cfg.Resources
	var err error
	select {
	case err = <-d.release:
	case <-ctx.Done():
		return client.ContainerUpdateResult{}, ctx.Err()
	}
	if err == nil {
		// Off the test goroutine: an error is returned, not t.Fatal.
		err = os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", d.rel, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(cfg.Resources.CPUQuota, 10)), 0)
	}
	return client.ContainerUpdateResult{}, err
}

func TestCutUnderDockerUpdateAcknowledgedOnlyAfterItSettled(t *testing.T) {
	rel := cgtest.New(t, "settle")
	e, err := NewEntry("x", true, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	d := &runcDocker{rel: rel, started: make(chan container.Resources, 4), release: make(chan error)}
	type settled struct {
		gen   uint64
		quota string // the cgroup's quota when the ack was released
	}
	got := make(chan settled, 4)
	r := &Reconciler{A: a, Docker: d, Log: slog.New(slog.DiscardHandler), Window: time.Millisecond,
		Settled: func(h uint32, gen uint64) { got <- settled{gen, cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us")} }}
	a.Reconcile = r
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	if a.HoldAck(1, 1) {
		t.Fatal("held with no docker update in flight")
	}
	if err := a.Apply(1, 1, &pb.Limits{CpuQuotaUs: 50000, CpuPeriodUs: 100000}); err != nil {
		t.Fatal(err)
	}
	if res := <-d.started; res.CPUQuota != 50000 {
		t.Fatalf("docker update carries quota %d, want 50000", res.CPUQuota)
	}
	// A raise while it is in flight needs no hold; a cut below it does.
	if err := a.Apply(1, 2, &pb.Limits{CpuQuotaUs: 70000}); err != nil {
		t.Fatal(err)
	}
	if a.HoldAck(1, 2) {
		t.Fatal("a raise above the in-flight docker update was held")
	}
	if err := a.Apply(1, 3, &pb.Limits{CpuQuotaUs: 20000}); err != nil {
		t.Fatal(err)
	}
	if !a.HoldAck(1, 3) {
		t.Fatal("a cut below the in-flight docker update was acknowledged at once")
	}
	// The update times out (no answer): it may still land, keep holding.
	d.release <- context.DeadlineExceeded
	select {
	case s := <-got:
		t.Fatalf("released after a timed-out update (gen %d)", s.gen)
	case res := <-d.started: // the retry, carrying the newest limits
		if res.CPUQuota != 20000 {
			t.Fatalf("retry carries quota %d, want 20000", res.CPUQuota)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no retry after a timed-out update")
	}
	if !a.HoldAck(1, 4) {
		t.Fatal("the timed-out update (quota 50000) may still land, but a cut to 20000 was not held")
	}
	// Now the stale 50000 lands (runc), then the retry returns.
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "50000")
	d.release <- nil
	select {
	case s := <-got:
		if s.gen != 4 || s.quota != "20000" {
			t.Fatalf("released gen %d with quota %s in the cgroup, want gen 4 with 20000", s.gen, s.quota)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held acknowledgements never released")
	}
	if a.HoldAck(1, 5) {
		t.Fatal("held after Docker's view settled")
	}
}

// With a window of an hour, a change is still in Docker's view after
// escrad stops: Run sends what it held before it returns.
func TestStopSendsDockerTheChangesTheWindowHeld(t *testing.T) {
	rel := cgtest.New(t, "flush")
	e, err := NewEntry("x", true, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	d := &runcDocker{rel: rel, started: make(chan container.Resources, 4), release: make(chan error, 4)}
	d.release <- nil
	r := &Reconciler{A: a, Docker: d, Log: slog.New(slog.DiscardHandler), Window: time.Hour}
	a.Reconcile = r
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	if err := a.Apply(1, 1, &pb.Limits{CpuQuotaUs: 30000, CpuPeriodUs: 100000}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-d.started:
		t.Fatalf("docker update (quota %d) sent inside the window", res.CPUQuota)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(flushTimeout + 5*time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case res := <-d.started:
		if res.CPUQuota != 30000 {
			t.Fatalf("update at stop carries quota %d, want 30000", res.CPUQuota)
		}
	default:
		t.Fatal("Run returned without sending Docker the held change")
	}
	if r.Updates.Load() != 1 {
		t.Errorf("%d docker updates counted, want 1", r.Updates.Load())
	}
}
