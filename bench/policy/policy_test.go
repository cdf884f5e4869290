package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/bench/sampler"
	"github.com/escra-dev/escra/controller/recommender"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/workloadimages"
)

// recordingApplier stands in for the cgroup in the unit test of Runner.
type recordingApplier struct{ got []recommender.Limits }

func (a *recordingApplier) Apply(_ string, l recommender.Limits) error {
	a.got = append(a.got, l)
	return nil
}

func TestRunnerAppliesAtTheRecommenderInterval(t *testing.T) {
	app := &recordingApplier{}
	r := &Runner{Applier: app, New: func(string) recommender.Recommender {
		return recommender.NewVPA(recommender.DefaultVPA(time.Second))
	}}
	t0 := time.Unix(1000, 0)
	for i := 0; i < 30; i++ { // 3 s of 100 ms samples; usage steps up at 1.5 s
		cpu := 0.2
		if i >= 15 {
			cpu = 0.8
		}
		r.OnSample(sampler.Snapshot{T: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Per: []sampler.ContainerSample{{ID: "c", CPUUsage: cpu, MemUsage: 50 << 20, Valid: true}}})
	}
	// Applied at 0 s, then checked at 1 s and 2 s: the first check sees
	// only 0.2 (no change, not counted), the second the step to 0.8.
	if len(app.got) != 2 || r.Changes != 2 {
		t.Fatalf("applied %d times (%+v), changes %d; want 2", len(app.got), app.got, r.Changes)
	}
	if app.got[1].CPU <= app.got[0].CPU {
		t.Errorf("CPU limit did not follow the step: %+v", app.got)
	}
	// With a 2 s warm-up the first apply waits for 2 s of history.
	app3 := &recordingApplier{}
	r3 := &Runner{Applier: app3, Warmup: 2 * time.Second, New: func(string) recommender.Recommender {
		return recommender.NewVPA(recommender.DefaultVPA(time.Second))
	}}
	for i := 0; i < 25; i++ {
		r3.OnSample(sampler.Snapshot{T: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Per: []sampler.ContainerSample{{ID: "c", CPUUsage: 0.5, MemUsage: 50 << 20, Valid: true}}})
		if i < 20 && len(app3.got) > 0 {
			t.Fatalf("applied at sample %d, inside the warm-up", i)
		}
	}
	if len(app3.got) != 1 {
		t.Errorf("applied %d times after the warm-up, want 1", len(app3.got))
	}
	// Static applies once.
	app2 := &recordingApplier{}
	r2 := &Runner{Applier: app2, New: func(string) recommender.Recommender {
		return &recommender.Static{K: 1.5, PeakCPU: 1, PeakMem: 100 << 20}
	}}
	for i := 0; i < 20; i++ {
		r2.OnSample(sampler.Snapshot{T: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Per: []sampler.ContainerSample{{ID: "c", CPUUsage: 0.5, MemUsage: 50 << 20, Valid: true}}})
	}
	if len(app2.got) != 1 || app2.got[0].CPU != 1.5 {
		t.Errorf("static applied %+v", app2.got)
	}
}

func dockerClient(t *testing.T) *client.Client {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatalf("docker engine: %v (scripts/setup.sh starts it)", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func start(t *testing.T, cli *client.Client, img string, cmd ...string) string {
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: img, Cmd: cmd, Labels: map[string]string{"escra.test": "bench-policy"}},
		HostConfig: &container.HostConfig{NetworkMode: "host"}, Name: fmt.Sprintf("escra-test-policy-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}) })
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func buildImage(t *testing.T, cli *client.Client, spec workloadimages.Spec) string {
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag, err := (&workloadimages.Builder{Docker: cli, RepoRoot: root}).Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// TestStaticLimitThrottlesRealContainer: a Static 0.2-core limit applied
// by CgroupApplier to a real demo-http container under CPU load shows up
// in the cgroup, in the sampler's limit, and as throttled periods and
// usage capped near 0.2 cores; slack is recorded every 100 ms.
func TestStaticLimitThrottlesRealContainer(t *testing.T) {
	cli := dockerClient(t)
	tag := buildImage(t, cli, workloadimages.DemoHTTP)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	id := start(t, cli, tag, "-listen", fmt.Sprintf("127.0.0.1:%d", port))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 200 {
			t.Fatal("demo-http never answered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sampler.New(ctx, cli, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &Runner{Applier: CgroupApplier{Groups: s.Group}, New: func(string) recommender.Recommender {
		return &recommender.Static{K: 1, PeakCPU: 0.2, PeakMem: 256 << 20}
	}}
	rec := &sampler.Recorder{Series: id}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.Run(ctx, 100*time.Millisecond, func(snap sampler.Snapshot) { r.OnSample(snap); rec.Add(snap) })
	}()
	// Two clients asking for 20 ms of CPU back to back: demand ≈ 2 cores.
	var served atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				resp, err := http.Get(base + "/cpu?ms=20")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					served.Add(1)
				}
			}
		}()
	}
	time.Sleep(3200 * time.Millisecond)
	cancel()
	wg.Wait()

	g, _ := s.Group(id)
	q, p, err := g.CPULimit()
	if err != nil || q != 20000 || p != 100000 {
		t.Errorf("cgroup quota %d/%d (%v), want 20000/100000", q, p, err)
	}
	if m, _ := g.ReadInt(cgroups.MemLimit); m != 256<<20 {
		t.Errorf("memory limit %d, want %d", m, 256<<20)
	}
	var run report.Run
	rec.Fill(&run)
	if len(run.Slack) < 20 || len(run.Series) < 20 {
		t.Fatalf("%d slack and %d series samples in 3 s", len(run.Slack), len(run.Series))
	}
	if run.LimitChanges != 1 { // unlimited → 0.2 cores, 256 MiB, seen once by the sampler
		t.Errorf("sampler saw %d limit changes, want 1", run.LimitChanges)
	}
	if run.ThrottledPeriods < 5 {
		t.Errorf("%d throttled periods of %d under 2 cores of demand at a 0.2 limit", run.ThrottledPeriods, run.Periods)
	}
	late := run.Series[len(run.Series)/2:]
	var use float64
	for _, pt := range late {
		use += pt.CPUUsage
		if pt.CPULimit != 0.2 {
			t.Fatalf("sampled limit %v, want 0.2", pt.CPULimit)
		}
	}
	use /= float64(len(late))
	if use < 0.1 || use > 0.3 {
		t.Errorf("mean usage %.3f cores under a 0.2 limit", use)
	}
	if served.Load() == 0 {
		t.Error("no request served")
	}
	if r.Changes != 1 || r.Errors != 0 {
		t.Errorf("changes %d errors %d (%v)", r.Changes, r.Errors, r.LastErr)
	}
}

// TestOOMIsSeen: a Static memory limit below memwave's peak gets the
// container OOM-killed; WatchOOM reports it and the runner passes it on.
func TestOOMIsSeen(t *testing.T) {
	cli := dockerClient(t)
	tag := buildImage(t, cli, workloadimages.Memwave)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ooms := make(chan string, 4)
	kills := make(chan string, 4)
	// The event streams are the host's: other packages' tests, run in
	// parallel by go test ./..., OOM-kill their own containers. Only
	// this test's container is passed on.
	var ours atomic.Value
	ours.Store("")
	mine := func(ch chan string) func(string, time.Time) {
		return func(id string, _ time.Time) {
			if id == ours.Load().(string) {
				ch <- id
			}
		}
	}
	go sampler.WatchOOM(ctx, cli, mine(ooms))
	go sampler.WatchKills(ctx, cli, mine(kills))
	time.Sleep(200 * time.Millisecond) // the event stream is subscribed
	id := start(t, cli, tag, "-min", "8", "-max", "160", "-period", "4s")
	ours.Store(id)
	s, err := sampler.New(ctx, cli, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &Runner{Applier: CgroupApplier{Groups: s.Group}, New: func(string) recommender.Recommender {
		return &recommender.Static{K: 1, PeakCPU: 1, PeakMem: 48 << 20}
	}}
	r.OnSample(s.Sample(ctx))
	time.Sleep(100 * time.Millisecond)
	r.OnSample(s.Sample(ctx))
	if r.Changes != 1 {
		t.Fatalf("limit not applied: %v", r.LastErr)
	}
	select {
	case got := <-ooms:
		if got != id {
			t.Errorf("OOM of %s, want %s", got, id)
		}
		r.OnOOM(got, time.Now())
	case <-ctx.Done():
		t.Fatal("no OOM event")
	}
	select {
	case got := <-kills:
		if got != id {
			t.Errorf("OOM kill of %s, want %s", got, id)
		}
	case <-ctx.Done():
		in, _ := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		b, _ := json.Marshal(in.Container.State)
		t.Fatalf("no OOM kill seen; state %s", b)
	}
}

// SetQuota keeps the baselines' CFS burst at its share of every quota,
// down and up: the kernel refuses a quota below the burst.
func TestSetQuotaCarriesTheBurst(t *testing.T) {
	if cgroups.HostVersion() != cgroups.V1 || os.Geteuid() != 0 {
		t.Skip("needs root and the v1 cpu hierarchy")
	}
	rel := fmt.Sprintf("escra-test-policy-burst-%d", os.Getpid())
	for _, c := range []string{"cpu", "memory"} {
		dir := filepath.Join("/sys/fs/cgroup", c, rel)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
	}
	p, err := cgroups.PathsForCgroup(rel)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroups.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !g.Has(cgroups.CPUBurst) {
		t.Skip("no cpu.cfs_burst_us on this kernel")
	}
	for _, c := range []struct{ q, want int64 }{{60000, 60000}, {10000, 10000}, {30000, 30000}} {
		if err := SetQuota(g, c.q, 1); err != nil {
			t.Fatalf("quota %d: %v", c.q, err)
		}
		if b, _ := g.ReadInt(cgroups.CPUBurst); b != c.want {
			t.Fatalf("quota %d: burst %d, want %d", c.q, b, c.want)
		}
	}
}
