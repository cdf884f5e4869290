package load

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// countIn counts offsets in [from, to).
func countIn(s []time.Duration, from, to time.Duration) int {
	n := 0
	for _, t := range s {
		if t >= from && t < to {
			n++
		}
	}
	return n
}

func sorted(t *testing.T, s []time.Duration, d time.Duration) {
	t.Helper()
	for i, v := range s {
		if v < 0 || v >= d || (i > 0 && v < s[i-1]) {
			t.Fatalf("offset %d = %v out of order or outside [0,%v)", i, v, d)
		}
	}
}

func TestFixed(t *testing.T) {
	s := Fixed{RPS: 100}.Schedule(10 * time.Second)
	sorted(t, s, 10*time.Second)
	if len(s) != 1000 {
		t.Fatalf("100 req/s for 10 s: %d requests", len(s))
	}
	if s[1]-s[0] != 10*time.Millisecond || s[999] != 9990*time.Millisecond {
		t.Errorf("spacing: %v, last %v", s[1]-s[0], s[999])
	}
}

func TestExpIsPoissonAtRate(t *testing.T) {
	e := Exp{RPS: 200, Seed: 7}
	d := 60 * time.Second
	s := e.Schedule(d)
	sorted(t, s, d)
	// Mean 12000, sd ≈ 110: ±4 sd.
	if n := len(s); n < 11560 || n > 12440 {
		t.Errorf("%d arrivals in 60 s at 200/s", n)
	}
	// Exponential gaps: coefficient of variation ≈ 1 (Fixed has 0).
	var sum, sq float64
	for i := 1; i < len(s); i++ {
		g := (s[i] - s[i-1]).Seconds()
		sum += g
		sq += g * g
	}
	n := float64(len(s) - 1)
	mean := sum / n
	cv := math.Sqrt(sq/n-mean*mean) / mean
	if cv < 0.9 || cv > 1.1 {
		t.Errorf("gap CV %.3f, want ≈ 1", cv)
	}
	// Deterministic per seed, different across seeds.
	if s2 := e.Schedule(d); len(s2) != len(s) || s2[100] != s[100] {
		t.Error("same seed gave a different schedule")
	}
	if s3 := (Exp{RPS: 200, Seed: 8}).Schedule(d); len(s3) > 100 && s3[100] == s[100] {
		t.Error("different seeds gave the same schedule")
	}
}

func TestBurst(t *testing.T) {
	b := Burst{Base: 50, BurstRPS: 600, Seed: 1}
	d := 80 * time.Second
	s := b.Schedule(d)
	sorted(t, s, d)
	for c := 0; c < 4; c++ {
		start := time.Duration(c) * 20 * time.Second
		calm := countIn(s, start, start+10*time.Second)
		burst := countIn(s, start+10*time.Second, start+20*time.Second)
		if calm != 500 {
			t.Errorf("cycle %d calm half: %d requests, want 500 (50/s)", c, calm)
		}
		// 500 base + Poisson(6000), sd ≈ 77.
		if burst < 6500-400 || burst > 6500+400 {
			t.Errorf("cycle %d burst half: %d requests, want ≈ 6500", c, burst)
		}
	}
	if b.Rate(5*time.Second) != 50 || b.Rate(15*time.Second) != 650 || b.Rate(25*time.Second) != 50 {
		t.Errorf("rates %v %v %v", b.Rate(5*time.Second), b.Rate(15*time.Second), b.Rate(25*time.Second))
	}
}

func TestTrace(t *testing.T) {
	tr := Trace{Min: 56, Max: 548, Period: 60 * time.Second, Seed: 3}
	d := 120 * time.Second
	ps := tr.perSecond(d)
	lo, hi := math.Inf(1), 0.0
	for _, r := range ps {
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	if lo < 56 || hi > 548 {
		t.Errorf("rate range [%v,%v] outside [56,548]", lo, hi)
	}
	// Diurnal: the "night" (first and last 10 s of each day) is much quieter
	// than "noon" (the middle 10 s).
	s := tr.Schedule(d)
	sorted(t, s, d)
	night := countIn(s, 0, 10*time.Second) + countIn(s, 50*time.Second, 70*time.Second) + countIn(s, 110*time.Second, d)
	noon := countIn(s, 25*time.Second, 35*time.Second) + countIn(s, 85*time.Second, 95*time.Second)
	if noon < 3*night/2 { // 40 s of night vs 20 s of noon
		t.Errorf("noon %d requests in 20 s, night %d in 40 s: no diurnal shape", noon, night)
	}
	// Each second's count follows its rate (Poisson, ±5 sd over the whole run).
	want := 0.0
	for i := 0; i < 120; i++ {
		want += ps[i]
	}
	if n := float64(len(s)); math.Abs(n-want) > 5*math.Sqrt(want) {
		t.Errorf("%v arrivals, trace rates sum to %v", n, want)
	}
	if tr.Rate(30*time.Second) != ps[30] {
		t.Error("Rate disagrees with the schedule's per-second rates")
	}
	if s2 := tr.Schedule(d); len(s2) != len(s) {
		t.Error("trace is not deterministic")
	}
}

func TestShapeByName(t *testing.T) {
	for _, n := range []string{"fixed", "exp", "burst", "trace"} {
		s, err := ShapeByName(n, 0.25, 1)
		if err != nil || s.Name() != n {
			t.Errorf("%s: %v", n, err)
		}
	}
	if f, _ := ShapeByName("fixed", 0.25, 1); f.Rate(0) != 100 {
		t.Errorf("fixed at scale 0.25: %v req/s, want 100", f.Rate(0))
	}
	if _, err := ShapeByName("alibaba", 1, 1); err == nil {
		t.Error("unknown shape accepted")
	}
}

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond, 0.999: 999 * time.Millisecond, 1: time.Second} {
		if got := Quantile(d, q); got != want {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
}

func TestParseWrk(t *testing.T) {
	out, err := os.ReadFile("testdata/wrk.txt")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseWrk(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 814 || r.Successes != 814 || r.P50Us != 1966 || r.P99Us != 9939 || r.P999Us != 18480 || r.MaxUs != 18480 {
		t.Errorf("parsed %+v", r)
	}
	if math.Abs(r.ThroughputRPS-814/1.004694) > 1e-6 {
		t.Errorf("throughput %v", r.ThroughputRPS)
	}
	r, _ = ParseWrk("ESCRA requests=10 duration_us=2000000 errors_status=3 errors_timeout=1 p50_us=1 p99_us=2 p999_us=3")
	if r.Successes != 6 || r.ThroughputRPS != 3 {
		t.Errorf("errors not subtracted: %+v", r)
	}
	if _, err := ParseWrk("Running 1s test @ http://127.0.0.1/\n"); err == nil {
		t.Error("output without result line accepted")
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out, err := os.ReadFile("testdata/redis-benchmark.txt")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ParseRedisBenchmark(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Test != "PING_INLINE" || rs[2].Test != "SET" {
		t.Fatalf("tests %+v", rs)
	}
	set := rs[2]
	if set.Requests != 3000 || set.ThroughputRPS != 16129.03 || set.P50Us != 103 || set.P99Us != 3559 || set.MaxUs != 27183 || set.MeanUs != 236 {
		t.Errorf("SET parsed %+v", set)
	}
	if set.P999Us != 27087 { // first "Latency by percentile" line at ≥ 99.9 %
		t.Errorf("SET p99.9 %v, want 27087", set.P999Us)
	}
	if _, err := ParseRedisBenchmark("Could not connect to Redis at 127.0.0.1:1: Connection refused\n"); err == nil {
		t.Error("error output accepted")
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:80/", "http://localhost:1/x", "redis://127.9.9.9"} {
		if err := CheckLoopback(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"http://203.0.113.1/", "http://example.com/", "http://1270.0.0.1/"} {
		if err := CheckLoopback(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

// TestRunHTTPOpenLoop runs real vegeta against a real server whose handler
// stalls for 300 ms once: an open-loop client keeps sending on schedule, so
// the requests due during the stall all see long latencies (no coordinated
// omission) and the count sent equals the schedule.
func TestRunHTTPOpenLoop(t *testing.T) {
	stallAt := time.Now().Add(500 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if now := time.Now(); now.After(stallAt) && now.Before(stallAt.Add(300*time.Millisecond)) {
			time.Sleep(stallAt.Add(300 * time.Millisecond).Sub(now))
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	res, err := RunHTTP(context.Background(), HTTPRun{URL: srv.URL, Shape: Fixed{RPS: 200}, Duration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 300 || res.Successes != 300 {
		t.Fatalf("sent %d, ok %d; want 300 each", res.Requests, res.Successes)
	}
	// 60 of 300 requests (20 %) are due in the stall and wait up to 300 ms:
	// p99 must show it, p50 must not.
	if res.P99Us < 200e3 || res.P50Us > 100e3 {
		t.Errorf("p50 %v µs, p99 %v µs: stall not seen as an open-loop client would", res.P50Us, res.P99Us)
	}
	if res.ThroughputRPS < 150 || res.ThroughputRPS > 250 {
		t.Errorf("throughput %v req/s, want ≈ 200", res.ThroughputRPS)
	}
	if _, err := RunHTTP(context.Background(), HTTPRun{URL: "http://192.0.2.1/", Shape: Fixed{RPS: 1}, Duration: time.Second}); err == nil {
		t.Error("non-loopback target accepted")
	}
}

// TestRedisBenchmarkAndWrkAgainstRealServers runs the Debian tools against
// real servers on loopback (redis-server directly; wrk against a Go server).
func TestRedisBenchmarkAndWrkAgainstRealServers(t *testing.T) {
	for _, b := range []string{"redis-server", "redis-benchmark", "wrk"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh installs it)", b)
		}
	}
	port := 30000 + os.Getpid()%20000
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; ; i++ { // wait for the listener (redis-benchmark retries forever)
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rs, err := RunRedisBenchmark(ctx, RedisRun{Port: port, Requests: 2000, Clients: 4, Tests: []string{"set", "get"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Requests != 2000 || rs[0].ThroughputRPS <= 0 || rs[1].P999Us < rs[1].P50Us {
		t.Errorf("redis-benchmark results %+v", rs)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	wr, err := RunWrk(ctx, WrkRun{URL: srv.URL, Conns: 2, Duration: time.Second, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if wr.Requests < 50 || wr.Successes != wr.Requests || wr.P999Us < wr.P50Us || wr.DurationS < 0.9 {
		t.Errorf("wrk result %+v", wr)
	}
}
