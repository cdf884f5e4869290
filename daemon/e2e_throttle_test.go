package daemon_test

// Throttle events on the real engine: a labelled container with a low
// quota starts burning CPU; escrad sees nr_throttled rise between period
// samples and the controller's escra policy raises the quota at once,
// well inside one period. escra-paper, the negative control, waits for the
// period's record.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

// reasons follows the controller's event stream: every limits decision's
// reason, per container id.
type reasons struct {
	mu  sync.Mutex
	per map[string][]string
}

func (r *reasons) has(id, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.per[id] {
		if x == reason {
			return true
		}
	}
	return false
}

// count is how many decisions id has had so far.
func (r *reasons) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.per[id])
}

// hasSince reports whether one of id's decisions after the first n had
// one of the reasons.
func (r *reasons) hasSince(id string, n int, reasons ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.per[id][min(n, len(r.per[id])):] {
		if slices.Contains(reasons, x) {
			return true
		}
	}
	return false
}

func followEvents(t *testing.T, admin string) *reasons {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+admin+"/v1/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &reasons{per: map[string][]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e events.Event
			if json.Unmarshal([]byte(data), &e) == nil && e.Kind == "limits" {
				r.mu.Lock()
				r.per[e.ContainerID] = append(r.per[e.ContainerID], e.Reason)
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	return r
}

func TestThrottleEventRaisesQuotaWithinThePeriod(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	escraApp := appLabel(t)[containers.AppLabel]
	paperApp := escraApp + "-p"

	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	// The controller's own path is under test: no host-local leases (those
	// answer throttle events on the host; TestLeaseRaisesQuotaOnTheHost).
	cfg.Params.LeaseFraction = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	for _, a := range []server.AppSpec{
		{Name: escraApp, CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.5},
		{Name: paperApp, Policy: "escra-paper", CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.5},
	} {
		if err := s.DefineApp(a); err != nil {
			t.Fatal(err)
		}
	}
	ev := followEvents(t, s.AdminAddr())

	var mu sync.Mutex
	raises := map[uint32][]time.Duration{}
	a := startAgent(t, "", s.TCPAddr(), func(c *agent.Config) {
		c.Apps = []string{escraApp, paperApp}
		c.ThrottlePoll = 2 * time.Millisecond
		c.OnThrottleRaise = func(h uint32, took time.Duration) {
			mu.Lock()
			raises[h] = append(raises[h], took)
			mu.Unlock()
		}
	})
	// A light steady load (2 ms per 100 ms) so periods are reported and
	// the quota comes down to the floor.
	run := func(app, name string) string {
		return dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName(name), Image: img,
			Cmd: []string{"-duty", "0.02"}, Labels: map[string]string{containers.AppLabel: app},
			Resources: container.Resources{CPUQuota: 50000, CPUPeriod: 100000, Memory: 64 << 20, MemorySwap: 64 << 20}})
	}
	escraID, paperID := run(escraApp, "e2e-thr"), run(paperApp, "e2e-thr-p")
	quotaFile := func(id string) string {
		return filepath.Join(cgroupOf(t, inspectPid(t, cli, id)).CPU, "cpu.cfs_quota_us")
	}
	cgQuota := func(f string) int64 { q, _ := strconv.ParseInt(readFile(t, f), 10, 64); return q }
	qf := map[string]string{escraID: quotaFile(escraID), paperID: quotaFile(paperID)}
	// Both quotas low in one look, then the slate wiped: raises and
	// decisions before the burst are not the burst's. The light load can
	// graze a 5 ms quota, and escra then raises it to the app's whole
	// budget, where the burst could not raise it further: so the escra
	// quota must still be low after the wipe, or the wait starts again.
	var low map[string]int64
	var before int
	deadline := time.Now().Add(20 * time.Second)
	for {
		low = map[string]int64{}
		for id, f := range qf {
			m := member(s, id)
			if m != nil && m.CPUQuotaUs > 0 && m.CPUQuotaUs <= 15000 && cgQuota(f) == m.CPUQuotaUs {
				low[id] = m.CPUQuotaUs
			}
		}
		if len(low) == 2 {
			mu.Lock()
			clear(raises)
			mu.Unlock()
			before = ev.count(escraID)
			if m := member(s, escraID); m != nil && m.CPUQuotaUs == low[escraID] {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("quotas not scaled down to ≤ 15 ms within 20 s: %v (escra %v, paper %v)", low, member(s, escraID), member(s, paperID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	he, hp := handleOf(t, a, escraID), handleOf(t, a, paperID)

	// The burst: two busy threads in each container, far over the quota.
	for _, id := range []string{escraID, paperID} {
		ex, err := cli.ContainerExecCreate(context.Background(), id, container.ExecOptions{Cmd: []string{"/bin/spin", "-threads", "2", "-for", "4s"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.ContainerExecStart(context.Background(), ex.ID, container.ExecStartOptions{Detach: true}); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(4 * time.Second)
	raised := func() bool { mu.Lock(); defer mu.Unlock(); return len(raises[he]) > 0 }
	for !ev.hasSince(escraID, before, "throttle-event") || !raised() {
		if time.Now().After(deadline) {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			t.Fatalf("no throttle-event raise within 4 s of the burst: escra member %+v, raised %v, reasons %v",
				member(s, escraID), raised(), ev.per[escraID])
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The paper app's member: its events arrive too (docker exec may
	// start its burst later on a loaded host), and its raise comes with
	// a period's record.
	deadline = time.Now().Add(4 * time.Second)
	for m := member(s, paperID); m == nil || m.ThrottleEvents == 0 || !ev.has(paperID, "throttled"); m = member(s, paperID) {
		if time.Now().After(deadline) {
			ev.mu.Lock()
			t.Fatalf("escra-paper member: no throttle event and period raise within 4 s: %+v, reasons %v", m, ev.per[paperID])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if q := cgQuota(qf[escraID]); q <= low[escraID] {
		t.Errorf("escra cgroup quota %d µs, not above %d µs after the throttle event", q, low[escraID])
	}
	mu.Lock()
	took := append([]time.Duration(nil), raises[he]...)
	paperTook := append([]time.Duration(nil), raises[hp]...)
	mu.Unlock()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	// The first rise of nr_throttled seen by escrad to the raised quota
	// written: far less than the period a period decision waits for.
	if took[0] >= 50*time.Millisecond {
		t.Errorf("throttle event to quota raised took %v; want well under one 100 ms period", took[0])
	}
	t.Logf("escra: throttle event → quota raised in %v (all %v); escra-paper raises after an event %v", took[0], took, paperTook)
	// The negative control: escra-paper got throttle events but decides
	// once per period.
	if ev.has(paperID, "throttle-event") {
		ev.mu.Lock()
		t.Errorf("escra-paper raised on a throttle event: reasons %v", ev.per[paperID])
		ev.mu.Unlock()
	}
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`escra_throttle_events_total{result="raised"}`, `escra_throttle_events_total{result="nochange"}`} {
		i := strings.Index(string(b), want)
		if i < 0 || strings.HasPrefix(string(b[i+len(want):]), " 0\n") {
			t.Errorf("%s not counted", want)
		}
	}
}
