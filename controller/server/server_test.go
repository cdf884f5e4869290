package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/internal/simdaemon"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

const mib = 1 << 20

func start(t *testing.T, mod func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mod != nil {
		mod(&cfg)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, s *Server, host string, cores uint32) *simdaemon.Daemon {
	t.Helper()
	d, err := simdaemon.Dial(s.TCPAddr(), host, cores, 8<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func container(s *Server, app string, handle uint32) (ContainerState, bool) {
	for _, c := range s.Snapshot().Containers {
		if c.App == app && c.Handle == handle {
			return c, true
		}
	}
	return ContainerState{}, false
}

// Two hosts share one app: bootstrap per eq. (2), telemetry over UDP
// moves quota from an idle member to a throttled one, Σ ≤ Ω throughout,
// and the daemons see the same limits the controller reports.
func TestSessionsTelemetryAndRebalance(t *testing.T) {
	s := start(t, nil)
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	d1 := dial(t, s, "h1", 4)
	d2 := dial(t, s, "h2", 4)
	if d1.SessionID == d2.SessionID || d1.PeriodUs != 100000 {
		t.Fatalf("hello: sessions %d %d period %d", d1.SessionID, d2.SessionID, d1.PeriodUs)
	}
	if err := d1.Register(1, "web", -1, 0, 10*mib); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bootstrap of the first member", func() bool {
		c, ok := d1.Container(1)
		return ok && c.QuotaUs == 200000 && c.MemLimit == 512*mib
	})
	d2.Register(7, "web", -1, 0, 10*mib)
	eventually(t, "rebalance on join", func() bool {
		a, _ := d1.Container(1)
		b, _ := d2.Container(7)
		return a.QuotaUs == 100000 && b.QuotaUs == 100000 && b.MemLimit == 256*mib
	})
	// h1's container idles, h2's is throttled every period.
	for range 30 {
		a, _ := d1.Container(1)
		d1.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: a.QuotaUs / 10}})
		d2.SendPeriod([]simdaemon.Stat{{Handle: 7, UsageUs: 400000, Throttled: true}})
		time.Sleep(3 * time.Millisecond)
		st := s.Snapshot()
		if st.Apps[0].CPUAllocatedCores > st.Apps[0].CPUCores+1e-9 {
			t.Fatalf("Σ %v > Ω %v", st.Apps[0].CPUAllocatedCores, st.Apps[0].CPUCores)
		}
	}
	eventually(t, "quota moved to the throttled member", func() bool {
		a, _ := d1.Container(1)
		b, _ := d2.Container(7)
		ca, _ := container(s, "web", 1)
		cb, _ := container(s, "web", 7)
		return a.QuotaUs < 50000 && b.QuotaUs > 150000 && a.QuotaUs == ca.CPUQuotaUs && b.QuotaUs == cb.CPUQuotaUs
	})
	if st := s.Stats(); st.Decisions == 0 || st.DecisionLatencyP99Us <= 0 || st.TelemetryStats < 60 {
		t.Fatalf("stats not counted: %+v", st)
	}
	// A daemon that goes away takes its containers with it.
	d1.Close()
	eventually(t, "members of a closed session removed", func() bool {
		st := s.Snapshot()
		return len(st.Hosts) == 1 && st.Apps[0].Members == 1
	})
}

// OOM: granted from the pool, the raised limit ahead of the verdict on
// the stream, so it is in force when the verdict arrives, without waiting
// for its ack; when the pool is empty, reclaim from the other member
// (never below usage) and grant; deny when nothing is left.
func TestOOMGrantInOrderReclaimAndDeny(t *testing.T) {
	s := start(t, func(c *Config) { c.OOMStepBytes = 64 * mib })
	s.DefineApp(AppSpec{Name: "db", CPUCores: 1, MemoryBytes: 512 * mib, Sigma: 0.25})
	d := dial(t, s, "h", 2)
	d.Register(1, "db", -1, 0, 100*mib)
	eventually(t, "bootstrap", func() bool { c, _ := d.Container(1); return c.MemLimit == 384*mib })
	d.Register(2, "db", -1, 0, 20*mib)
	eventually(t, "bootstrap 2", func() bool { c, _ := d.Container(2); return c.MemLimit == 128*mib })

	// The ack is delayed: the verdict must find the limit applied and
	// must not wait for the ack.
	d.AckDelay = time.Second
	t0 := time.Now()
	v, _, err := d.OOM(2, 128*mib, 128*mib, 0, 5*time.Second)
	took := time.Since(t0)
	if err != nil || !v.Granted || v.NewLimitBytes != 192*mib {
		t.Fatalf("first OOM: %+v %v", v, err)
	}
	if c, _ := d.Container(2); c.MemLimit != 192*mib {
		t.Fatalf("verdict before the limit was applied (limit %d)", c.MemLimit)
	}
	if took >= time.Second {
		t.Fatalf("verdict after %v: it waited for the delayed ack", took)
	}
	d.AckDelay = 0
	// σ = 0.25 of 512 MiB: member 1 got 384 MiB, member 2 min(192, 128) =
	// 128 MiB, pool empty; so the first grant already reclaimed member 1
	// (usage 100 MiB → limit 150 MiB) and the pool holds 170 MiB now.
	d.SetUsage(2, 190*mib)
	v, _, err = d.OOM(2, 190*mib, 192*mib, 0, 5*time.Second)
	if err != nil || !v.Granted || v.NewLimitBytes != 256*mib {
		t.Fatalf("second OOM: %+v %v", v, err)
	}
	c1, _ := d.Container(1)
	if c1.MemLimit != 100*mib+50*mib {
		t.Fatalf("member 1 not reclaimed to usage + δ: limit %d", c1.MemLimit)
	}
	st := s.Snapshot()
	if st.Apps[0].MemoryAllocatedBytes > st.Apps[0].MemoryBytes {
		t.Fatalf("Σ memory %d > budget %d", st.Apps[0].MemoryAllocatedBytes, st.Apps[0].MemoryBytes)
	}
	// Exhaust: eventually a request is denied with a reason.
	var denied *pb.OomVerdict
	for i := 0; i < 20 && denied == nil; i++ {
		v, _, err := d.OOM(2, 0, 0, 0, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !v.Granted {
			denied = v
		}
	}
	if denied == nil || !strings.Contains(denied.Reason, "exhausted") {
		t.Fatalf("never denied: %+v", denied)
	}
	c, _ := container(s, "db", 2)
	if c.OOMDenials != 1 || c.OOMGrants < 2 {
		t.Fatalf("counters: %+v", c)
	}
	if s.Stats().OOMVerdicts == 0 {
		t.Fatal("verdict latency not recorded")
	}
}

// A grant's set-limits the daemon never acks times out: the verdict did
// not wait for it, and the raise stays counted (whether the daemon
// applied it is not known), so the budget still holds.
func TestOOMSetLimitsTimeout(t *testing.T) {
	s := start(t, func(c *Config) { c.RPCTimeout = 200 * time.Millisecond })
	s.DefineApp(AppSpec{Name: "a", CPUCores: 1, MemoryBytes: 1 << 30, Sigma: 0.5})
	d := dial(t, s, "h", 1)
	d.Register(1, "a", -1, 0, 0)
	eventually(t, "bootstrap", func() bool { c, _ := d.Container(1); return c.MemLimit > 0 })
	before := s.Snapshot().Apps[0].MemoryAllocatedBytes
	d.NoAck.Store(true)
	v, _, err := d.OOM(1, 0, 0, 0, 5*time.Second)
	if err != nil || !v.Granted {
		t.Fatalf("want a grant: %+v %v", v, err)
	}
	time.Sleep(400 * time.Millisecond) // past the RPC timeout
	a := s.Snapshot().Apps[0]
	if a.MemoryAllocatedBytes != v.NewLimitBytes || a.MemoryAllocatedBytes <= before {
		t.Fatalf("allocated %d after the unanswered grant to %d (before %d): want the raise counted",
			a.MemoryAllocatedBytes, v.NewLimitBytes, before)
	}
	if a.MemoryAllocatedBytes > a.MemoryBytes {
		t.Fatalf("Σ memory %d over the budget %d", a.MemoryAllocatedBytes, a.MemoryBytes)
	}
}

// A container of an app nobody defined is managed with a budget summed
// from its members; DefineApp later replaces it.
func TestAutoCreatedApp(t *testing.T) {
	s := start(t, nil)
	d := dial(t, s, "h", 4)
	d.Register(1, "byhand", 50000, 256*mib, 0) // 0.5 core, 256 MiB
	d.Register(2, "byhand", -1, 0, 0)          // unlimited: host's 4 cores, 8 GiB
	eventually(t, "auto app with two members", func() bool {
		st := s.Snapshot()
		return len(st.Apps) == 1 && st.Apps[0].Members == 2
	})
	a := s.Snapshot().Apps[0]
	if !a.Auto || a.CPUCores != 4.5 || a.MemoryBytes != 256*mib+8<<30 {
		t.Fatalf("auto budget: %+v", a)
	}
	if err := s.DefineApp(AppSpec{Name: "byhand", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "defined budget enforced on the daemon", func() bool {
		c1, _ := d.Container(1)
		c2, _ := d.Container(2)
		return c1.QuotaUs+c2.QuotaUs <= 100000
	})
	if a := s.Snapshot().Apps[0]; a.Auto || a.CPUCores != 1 {
		t.Fatalf("define did not replace: %+v", a)
	}
}

// Periodic reclaim (§IV-C) lowers idle limits to usage + δ and the pool grows.
func TestPeriodicReclaim(t *testing.T) {
	s := start(t, func(c *Config) { c.ReclaimEvery = 100 * time.Millisecond })
	s.DefineApp(AppSpec{Name: "r", CPUCores: 1, MemoryBytes: 1 << 30})
	d := dial(t, s, "h", 1)
	d.Register(1, "r", -1, 0, 30*mib)
	eventually(t, "reclaimed to usage + 50 MiB", func() bool {
		c, _ := d.Container(1)
		sc, _ := container(s, "r", 1)
		return c.MemLimit == 80*mib && sc.MemoryLimitBytes == 80*mib
	})
}

// Bad input is dropped and counted, the session survives where it can,
// and the controller keeps serving.
func TestBadInputDroppedAndCounted(t *testing.T) {
	s := start(t, nil)
	s.DefineApp(AppSpec{Name: "x", CPUCores: 1, MemoryBytes: 1 << 30})
	d := dial(t, s, "h", 1)
	d.Register(1, "x", -1, 0, 0)
	eventually(t, "register", func() bool { _, ok := container(s, "x", 1); return ok })
	d.SendDatagram([]byte{0xff, 0xff, 0xff}) // malformed
	d.SendDatagram(make([]byte, 2000))       // oversized
	raw := mustMarshal(t, &pb.TelemetryBatch{SessionId: 999, PeriodUs: 100000, Stats: []*pb.CpuStat{{Handle: 1}}})
	d.SendDatagram(raw) // unknown session
	raw = mustMarshal(t, &pb.TelemetryBatch{SessionId: d.SessionID, PeriodUs: 100000, Stats: []*pb.CpuStat{
		{Handle: 42}, {Handle: 1, UnusedUs: -5, QuotaUs: 1000}, {Handle: 1, QuotaUs: -7}}})
	d.SendDatagram(raw) // unknown container, absurd values
	d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 10}})
	d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 10}})
	// a duplicate period
	raw = mustMarshal(t, &pb.TelemetryBatch{SessionId: d.SessionID, PeriodUs: 100000, Stats: []*pb.CpuStat{{Handle: 1, PeriodSeq: 0, QuotaUs: 1000}}})
	d.SendDatagram(raw)
	v, _, err := d.OOM(99, 0, 0, 0, 5*time.Second)
	if err != nil || v.Granted || v.Reason != "unknown container" {
		t.Fatalf("oom for unknown container: %+v %v", v, err)
	}
	eventually(t, "drops counted", func() bool {
		dr := s.Stats().Dropped
		return dr["malformed"] == 1 && dr["oversized"] == 1 && dr["unknown_session"] == 1 &&
			dr["unknown_container"] >= 2 && dr["absurd"] == 2 && dr["stale"] == 1
	})
	// A truncated envelope ends that session only.
	big := wire.MaxEnvelopeBytes + 10
	d.SendRaw([]byte{byte(big) | 0x80, byte(big>>7) | 0x80, byte(big >> 14)})
	<-d.Done()
	d2 := dial(t, s, "h2", 1)
	if err := d2.Register(1, "x", -1, 0, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "controller still serves", func() bool { return len(s.Snapshot().Hosts) == 1 && s.Snapshot().Apps[0].Members == 1 })
}

// Updates for a container carry increasing generations; the daemon side
// never sees a generation go backwards.
func TestGenerationsIncrease(t *testing.T) {
	s := start(t, nil)
	s.DefineApp(AppSpec{Name: "g", CPUCores: 2, MemoryBytes: 1 << 30})
	d := dial(t, s, "h", 2)
	last := map[uint32]uint64{}
	bad := false
	d.OnUpdate = func(u *pb.LimitUpdate) {
		if u.Generation <= last[u.Handle] {
			bad = true
		}
		last[u.Handle] = u.Generation
	}
	d.Register(1, "g", -1, 0, 0)
	d.Register(2, "g", -1, 0, 0)
	for i := range 40 {
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: int64(i%2) * 300000, Throttled: i%2 == 1}, {Handle: 2, UsageUs: 100}})
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "updates applied", func() bool { return d.Updates.Load() > 5 })
	d.SendUsage()
	if bad {
		t.Fatal("a generation went backwards")
	}
	if d.SetLimits.Load() >= d.Updates.Load()+1 && d.Updates.Load() > 0 && d.SetLimits.Load() > 2*d.Updates.Load() {
		t.Fatalf("updates not coalesced per host: %d envelopes for %d updates", d.SetLimits.Load(), d.Updates.Load())
	}
}

// The admin API serves the snapshot, accepts app specs and exports metrics.
func TestAdminAPI(t *testing.T) {
	s := start(t, nil)
	base := "http://" + s.AdminAddr()
	req, _ := http.NewRequest("PUT", base+"/v1/apps/api", strings.NewReader(`{"cpu_cores":2,"memory_bytes":1073741824,"sigma":0.1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("put: %v %v", err, resp)
	}
	resp.Body.Close()
	req, _ = http.NewRequest("PUT", base+"/v1/apps/bad", strings.NewReader(`{"cpu_cores":-1}`))
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 400 {
		t.Fatalf("bad spec accepted: %d", resp.StatusCode)
	}
	resp.Body.Close()
	d := dial(t, s, "h", 2)
	d.Register(3, "api", -1, 0, 0)
	evs, err := http.Get(base + "/v1/events?app=api")
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Body.Close()
	d.Register(4, "api", -1, 0, 0)
	buf := make([]byte, 4096)
	n, _ := evs.Body.Read(buf)
	if !strings.Contains(string(buf[:n]), "event:") {
		t.Fatalf("no event streamed: %q", buf[:n])
	}
	var apps []AppState
	resp, _ = http.Get(base + "/v1/apps")
	json.NewDecoder(resp.Body).Decode(&apps)
	resp.Body.Close()
	if len(apps) != 1 || apps[0].Name != "api" || apps[0].CPUCores != 2 {
		t.Fatalf("apps: %+v", apps)
	}
	eventually(t, "metrics", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), `escra_container_cpu_limit_cores{app="api",container="h-c3",host="h"}`) &&
			strings.Contains(string(b), "escra_decision_latency_seconds")
	})
	for _, p := range []string{"/v1/containers", "/v1/hosts"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v", p, err)
		}
		resp.Body.Close()
	}
	// The series are in cores, not µs: the quota over the period the
	// admin API reports for the same container.
	var cs []struct {
		ContainerID string `json:"container_id"`
		QuotaUs     int64  `json:"cpu_quota_us"`
		PeriodUs    int64  `json:"cpu_period_us"`
	}
	resp, _ = http.Get(base + "/v1/containers")
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, _ = http.Get(base + "/metrics")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	found := false
	for _, c := range cs {
		if c.ContainerID != "h-c3" || c.PeriodUs == 0 {
			continue
		}
		found = true
		m := regexp.MustCompile(`(?m)^escra_container_cpu_limit_cores\{app="api",container="h-c3",host="h"\} (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no cpu limit series for h-c3")
		}
		if got, want := string(m[1]), strconv.FormatFloat(float64(c.QuotaUs)/float64(c.PeriodUs), 'g', -1, 64); got != want {
			t.Errorf("escra_container_cpu_limit_cores = %s, want quota/period %s (%d/%d µs)", got, want, c.QuotaUs, c.PeriodUs)
		}
	}
	if !found {
		t.Errorf("/v1/containers has no h-c3 with a period: %+v", cs)
	}
	_ = allocator.MiB
}
