package pemaloop

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/pema"
)

func TestPercentile(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i)*time.Millisecond)
	}
	if p := Percentile(v, 0.95); p != 95*time.Millisecond {
		t.Fatalf("p95 %v", p)
	}
	if p := Percentile(nil, 0.95); p != 0 {
		t.Fatalf("empty %v", p)
	}
}

func TestUpstream(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:80", "http://127.0.0.1:8080", "localhost:1"} {
		if _, err := parseUpstream(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "ftp://x:1", "http://"} {
		if _, err := parseUpstream(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The proxy forwards to the real upstream and records what clients see,
// failures included.
func TestProxyRecords(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(30 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	p, err := NewProxy("127.0.0.1:0", up.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	get := func(path string) int {
		resp, err := http.Get("http://" + p.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 19 {
		if c := get("/"); c != 200 {
			t.Fatalf("status %d", c)
		}
	}
	get("/slow")
	w := p.Take()
	if w.N != 20 || w.Errors != 0 {
		t.Fatalf("window %+v", w)
	}
	up.Close()
	if c := get("/"); c != http.StatusBadGateway {
		t.Fatalf("dead upstream: status %d", c)
	}
	if w := p.Take(); w.N != 1 || w.Errors != 1 {
		t.Fatalf("window after a failure %+v", w)
	}
}

// fakeApp is the app as the loop reads it (a unit test of the loop
// around it; the e2e test uses the real one).
type fakeApp struct{ st app.State }

func (f *fakeApp) Snapshot() app.State { return f.st }

// A tick starts PEMA from the members' quotas, the next one steps and
// sets targets the allocator's policy returns; an interval with too few
// requests holds the allocation.
func TestLoopTicks(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	p := allocator.DefaultParams()
	sh := &fakeApp{st: app.State{Params: p, Budget: allocator.Budget{CPUCores: 1}, Members: []app.MemberState{
		{Info: app.MemberInfo{Key: 2, Name: "b"}, QuotaUs: 50000},
		{Info: app.MemberInfo{Key: 1, Name: "a"}, QuotaUs: 50000},
	}}}
	tg := allocator.NewTargets()
	c := pema.DefaultConfig(0.5)
	c.A, c.B = 0, 0
	l, err := Start(Config{App: "x", Interval: time.Hour, MinRequests: 5, PEMA: c, Listen: "127.0.0.1:0", Upstream: up.URL},
		sh, tg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Tick()
	if r := l.Records(); len(r) != 1 || r[0].Skipped != "started" || r[0].TotalCPU != 1 {
		t.Fatalf("%+v", r)
	}
	for range 10 {
		resp, err := http.Get("http://" + l.ProxyAddr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	l.Tick()
	r := l.Records()[1]
	if r.Kind != pema.KindCut || r.TotalCPU >= 1 || r.Requests != 10 {
		t.Fatalf("step %+v", r)
	}
	// The policy now answers with PEMA's target.
	q, reason := tg.NextQuota(allocator.CPUInput{Key: 1, QuotaUs: 50000})
	if reason != allocator.ReasonSLO || math.Abs(float64(q)-r.X["a"]*100000) > 1 {
		t.Fatalf("target %d %q, record %v", q, reason, r.X)
	}
	l.Tick() // no requests
	if r := l.Records()[2]; r.Kind != "" || !strings.Contains(r.Skipped, "requests") {
		t.Fatalf("%+v", r)
	}
}

// Replay: the loop run on telemetry recorded by `bench-pema -trace`
// (a real run on this machine), without a clock, makes the decisions
// the live loop made.
func TestReplayRecordedTrace(t *testing.T) {
	b, err := os.ReadFile("testdata/trace.json")
	if err != nil {
		t.Fatal("no recorded trace (bench-pema -trace controller/pemaloop/testdata/trace.json):", err)
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	var live []Record
	for _, r := range recs {
		if r.Kind != "" {
			live = append(live, r)
		}
	}
	if len(live) < 5 {
		t.Fatalf("trace has %d steps", len(live))
	}
	// bench-pema's configuration: the defaults with a 0.01-core floor, Ω = 1.5, seed 1.
	c := pema.DefaultConfig(live[0].SLOSecond)
	c.MinCPU, c.Budget = 0.01, 1.5
	steps, err := Replay(c, pema.RangeConfig{}, 1, recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != len(live) {
		t.Fatalf("%d replayed steps, %d recorded", len(steps), len(live))
	}
	for i, s := range steps {
		if s.Kind != live[i].Kind {
			t.Fatalf("step %d: replay %s, live %s", i, s.Kind, live[i].Kind)
		}
		var tot float64
		for _, x := range s.X {
			tot += x
		}
		if math.Abs(tot-live[i].TotalCPU) > 1e-9 {
			t.Fatalf("step %d: replay Σx %v, live %v", i, tot, live[i].TotalCPU)
		}
	}
}
