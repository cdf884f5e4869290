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
	"fmt"
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

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/events"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/internal/dockertest"
)

// reasons follows the controller's event stream: every limits decision's
// reason, per container id.
type reasons struct {
	mu  sync.Mutex
	per map[string][]string
	// trail is each decision as a failure reports it: time, generation,
	// quota and reason.
	trail map[string][]string
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

// firstSince is the first of the reasons among id's decisions after the
// first n ("" when none is).
func (r *reasons) firstSince(id string, n int, reasons ...string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.per[id][min(n, len(r.per[id])):] {
		if slices.Contains(reasons, x) {
			return x
		}
	}
	return ""
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
	r := &reasons{per: map[string][]string{}, trail: map[string][]string{}}
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
				r.trail[e.ContainerID] = append(r.trail[e.ContainerID],
					fmt.Sprintf("%s g%d q%d %s", e.Time.Format("15:04:05.000"), e.Generation, e.CPUQuotaUs, e.Reason))
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	return r
}

// burstIn starts two busy threads for 4 s in each container, far over a
// low quota.
func burstIn(t *testing.T, cli *client.Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		ex, err := cli.ExecCreate(context.Background(), id, client.ExecCreateOptions{Cmd: []string{"/bin/spin", "-threads", "2", "-for", "4s"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ExecStart(context.Background(), ex.ID, client.ExecStartOptions{Detach: true}); err != nil {
			t.Fatal(err)
		}
	}
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
	// waitLow waits until both quotas are low in one look, then wipes the
	// slate: raises and decisions before the burst are not the burst's.
	// The light load can graze a 5 ms quota, and escra then raises it to
	// the app's whole budget, where the burst could not raise it further:
	// so the escra quota, in the allocator and in the cgroup, must still be
	// that low after the wipe, or the wait starts again. It returns the
	// low quotas and how many decisions escra's member had before.
	waitLow := func() (map[string]int64, int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			low := map[string]int64{}
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
				before := ev.count(escraID)
				if m := member(s, escraID); m != nil && m.CPUQuotaUs == low[escraID] && cgQuota(qf[escraID]) == low[escraID] {
					return low, before
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("quotas not scaled down to ≤ 15 ms within 20 s: %v (escra %v, paper %v)", low, member(s, escraID), member(s, paperID))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var he, hp uint32
	raised := func() bool { mu.Lock(); defer mu.Unlock(); return len(raises[he]) > 0 }
	var low map[string]int64
	// A burst that starts throttling just before a CFS period ends is
	// answered by that period's record ("throttled"): the watcher's poll
	// (every 2 ms, later on a busy host) lost the race to the period's
	// end, and with one member that raise takes the whole budget, so no
	// throttle event can raise it after. Such a burst shows nothing about
	// events; a fresh one is started, three at most.
	const bursts = 3
	for try := 1; ; try++ {
		var before int
		low, before = waitLow()
		he, hp = handleOf(t, a, escraID), handleOf(t, a, paperID)
		burst := time.Now()
		burstIn(t, cli, escraID, paperID)
		deadline := time.Now().Add(4 * time.Second)
		first := ""
		for first == "" || first == "throttle-event" && !raised() {
			if time.Now().After(deadline) {
				var cur limits.Current
				var gen uint64
				if e := a.Applier().Get(he); e != nil {
					cur, gen = e.Current()
				}
				ev.mu.Lock()
				defer ev.mu.Unlock()
				t.Fatalf("burst %d: no throttle-event raise within 4 s (burst at %s, %d decisions before it): escra member %+v, "+
					"raised %v, cgroup quota %d, applied %d (gen %d), agent %v, decisions %v",
					try, burst.Format("15:04:05.000"), before, member(s, escraID), raised(), cgQuota(qf[escraID]), cur.CPUQuotaUs, gen,
					agentCounters(t, a), ev.trail[escraID])
			}
			time.Sleep(10 * time.Millisecond)
			first = ev.firstSince(escraID, before, "throttle-event", "throttled")
		}
		if first == "throttle-event" {
			break
		}
		ev.mu.Lock()
		trail := slices.Clone(ev.trail[escraID][before:])
		ev.mu.Unlock()
		if try == bursts {
			t.Fatalf("%d bursts, each raised first by its period's record, never by a throttle event: last %v", bursts, trail)
		}
		t.Logf("burst %d (at %s) was raised by its period's record before a throttle event: %v; bursting again",
			try, burst.Format("15:04:05.000"), trail)
	}
	// The paper app's member: its events arrive too (docker exec may
	// start its burst later on a loaded host), and its raise comes with
	// a period's record.
	deadline := time.Now().Add(4 * time.Second)
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

// agentCounters are the agent's counters and histogram counts by name
// (failure reports).
func agentCounters(t *testing.T, a *agent.Agent) map[string]float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Logf("agent metrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}
