package rescue

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/limits"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// fakeLink is the controller: it keeps each request and its verdict
// callback for the test to answer.
type fakeLink struct {
	mu       sync.Mutex
	reqs     []*pb.OomRequest
	verdicts []func(*pb.OomVerdict)
	down     bool
}

func (l *fakeLink) RequestOOM(req *pb.OomRequest, verdict func(*pb.OomVerdict)) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return 0, errors.New("no session")
	}
	l.reqs = append(l.reqs, req)
	l.verdicts = append(l.verdicts, verdict)
	return uint64(len(l.reqs)), nil
}

func (l *fakeLink) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down
}

func (l *fakeLink) setDown(down bool) { l.mu.Lock(); l.down = down; l.mu.Unlock() }

func (l *fakeLink) answer(i int, v *pb.OomVerdict) {
	l.mu.Lock()
	f := l.verdicts[i]
	l.mu.Unlock()
	f(v)
}

// fakeMem is the applier: one container's memory limit.
type fakeMem struct {
	mu     sync.Mutex
	limit  int64
	raises []int64
}

func (m *fakeMem) Current() (limits.Current, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return limits.Current{MemoryBytes: m.limit}, 0
}

func (m *fakeMem) MemoryWriteIssued() time.Time { return time.Time{} }

func (m *fakeMem) RaiseMemory(h uint32, limit int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.raises = append(m.raises, limit)
	if m.limit != cgroups.Max && (limit == cgroups.Max || limit > m.limit) {
		m.limit = limit // as limits.Applier: up only, unlimited is highest
	}
	return m.limit, nil
}

func (m *fakeMem) set(limit int64) { m.mu.Lock(); m.limit = limit; m.mu.Unlock() }

type resolution struct {
	ev      Event
	granted bool
	limit   int64
}

// fakeSource is the backend: it records each resolution.
type fakeSource struct{ got chan resolution }

func (s *fakeSource) Resolve(ev Event, granted bool, newLimit int64) error {
	s.got <- resolution{ev, granted, newLimit}
	return nil
}

type rig struct {
	r    *Rescuer
	link *fakeLink
	mem  *fakeMem
	src  *fakeSource
	reg  *prometheus.Registry
	c    *Container
	late prometheus.Counter
}

const limit0 = 32 << 20

func newRig(t *testing.T, deadline time.Duration) *rig {
	t.Helper()
	us := prometheus.ExponentialBuckets(1e-6, 2, 20)
	m := Metrics{
		Rescue:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escrad_oom_rescue_seconds", Buckets: us}),
		Events:  prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_oom_events_total"}),
		Outcome: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escrad_oom_outcomes_total"}, []string{"outcome"}),
		// Not registered: outcomes() reads the registry's outcome labels.
		LateGrants: prometheus.NewCounter(prometheus.CounterOpts{Name: "escrad_oom_late_grants_total"}),
	}
	g := &rig{link: &fakeLink{}, mem: &fakeMem{limit: limit0}, src: &fakeSource{got: make(chan resolution, 4)}, reg: prometheus.NewRegistry()}
	g.reg.MustRegister(m.Rescue, m.Events, m.Outcome)
	g.late = m.LateGrants
	g.r = New(Config{Deadline: deadline, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m}, g.link, g.mem, g.src)
	// A v2 group on escra.ko (not StockOOM): a recheck reads no files.
	g.c = &Container{H: 7, Name: "c7", G: &cgroups.Group{Paths: cgroups.Paths{Version: cgroups.V2}}, Mem: g.mem}
	g.c.Armed.Store(true)
	g.r.Add(g.c)
	return g
}

func (g *rig) resolved(t *testing.T) resolution {
	t.Helper()
	select {
	case res := <-g.src.got:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("event never resolved")
	}
	return resolution{}
}

// outcomes is escrad_oom_outcomes_total by outcome, and whether a rescue
// moment was observed.
func (g *rig) outcomes(t *testing.T) (map[string]float64, uint64) {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	var rescues uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "escrad_oom_outcomes_total":
				out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "escrad_oom_rescue_seconds":
				rescues = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return out, rescues
}

func (g *rig) event(pages uint64) Event {
	return Event{Handle: 7, At: time.Now(), Usage: limit0, Limit: limit0, Pages: pages}
}

// The pages the charge wanted go to the controller, and the granted
// limit is written and resolves the event.
func TestGrantCarriesPagesAndIsApplied(t *testing.T) {
	g := newRig(t, time.Minute)
	g.r.OOM(g.event(512))
	if len(g.link.reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(g.link.reqs))
	}
	req := g.link.reqs[0]
	if req.PagesWanted != 512 || req.Handle != 7 || req.LimitBytes != limit0 || req.UsageBytes != limit0 {
		t.Fatalf("request %v, want handle 7, 512 pages, limit and usage %d", req, limit0)
	}
	const granted = limit0 + 512*4096
	g.link.answer(0, &pb.OomVerdict{Handle: 7, Granted: true, NewLimitBytes: granted})
	res := g.resolved(t)
	if !res.granted || res.limit != granted || res.ev.Pages != 512 {
		t.Fatalf("resolved %+v, want granted at %d", res, granted)
	}
	if len(g.mem.raises) != 1 || g.mem.raises[0] != granted {
		t.Fatalf("raises %v, want one to %d", g.mem.raises, granted)
	}
	if o, rescues := g.outcomes(t); o["granted"] != 1 || rescues != 1 {
		t.Fatalf("outcomes %v, %d rescues; want one granted rescue", o, rescues)
	}
	if g.c.Pending() {
		t.Fatal("still pending after the verdict")
	}
}

// A backend that cannot know the pages sends 0: the controller's own step.
func TestNoPagesSendsZero(t *testing.T) {
	g := newRig(t, time.Minute)
	g.r.OOM(g.event(0))
	if g.link.reqs[0].PagesWanted != 0 {
		t.Fatalf("pages wanted %d, want 0", g.link.reqs[0].PagesWanted)
	}
	g.link.answer(0, &pb.OomVerdict{Granted: false})
	if res := g.resolved(t); res.granted {
		t.Fatalf("resolved %+v after a denial", res)
	}
}

// A grant whose SetLimits came first is not written again (a reclaim in
// between would be undone).
func TestGrantAfterSetLimitsRaiseNotRewritten(t *testing.T) {
	g := newRig(t, time.Minute)
	g.r.OOM(g.event(8))
	g.mem.set(limit0 + 1<<20)
	g.link.answer(0, &pb.OomVerdict{Granted: true, NewLimitBytes: limit0 + 2<<20})
	res := g.resolved(t)
	if !res.granted || res.limit != limit0+1<<20 {
		t.Fatalf("resolved %+v, want granted at the limit in place", res)
	}
	if len(g.mem.raises) != 0 {
		t.Fatalf("raises %v, want none", g.mem.raises)
	}
}

// Denied, controller lost and unreachable: the kernel acts, each counted
// by its outcome.
func TestNotGrantedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		why     string
		verdict *pb.OomVerdict
		down    bool
	}{
		{why: "denied", verdict: &pb.OomVerdict{Granted: false}},
		{why: "controller_lost"},
		{why: "controller_unreachable", down: true},
	} {
		t.Run(tc.why, func(t *testing.T) {
			g := newRig(t, time.Minute)
			g.link.down = tc.down
			g.r.OOM(g.event(4))
			if !tc.down {
				g.link.answer(0, tc.verdict)
			}
			if res := g.resolved(t); res.granted {
				t.Fatalf("resolved %+v, want not granted", res)
			}
			if o, _ := g.outcomes(t); o[tc.why] != 1 || len(o) != 1 {
				t.Fatalf("outcomes %v, want one %s", o, tc.why)
			}
		})
	}
}

// No verdict within the deadline: the request is canceled and the event
// released, unless the limit was raised meanwhile (a SetLimits grant).
func TestDeadline(t *testing.T) {
	g := newRig(t, 20*time.Millisecond)
	start := time.Now()
	g.r.OOM(g.event(4))
	res := g.resolved(t)
	if res.granted || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("resolved %+v after %v, want released at the deadline", res, time.Since(start))
	}
	if o, _ := g.outcomes(t); o["deadline"] != 1 {
		t.Fatalf("outcomes %v, want one deadline", o)
	}
	// A late verdict resolves nothing again and writes nothing (its
	// SetLimits, if any, came first), but it is counted.
	g.link.answer(0, &pb.OomVerdict{Granted: true, NewLimitBytes: limit0 * 2})
	select {
	case res := <-g.src.got:
		t.Fatalf("resolved again: %+v", res)
	case <-time.After(10 * time.Millisecond):
	}
	if n := counter(t, g.late); n != 1 || len(g.mem.raises) != 0 {
		t.Fatalf("late grants %v, raises %v; want one late grant, no write", n, g.mem.raises)
	}

	// A limit already above the one hit when the deadline fires (a
	// SetLimits raise): granted. Raised before the event, so no scheduling
	// delay of this goroutine can let the deadline fire first.
	g = newRig(t, 20*time.Millisecond)
	g.mem.set(limit0 * 2)
	g.r.OOM(g.event(4))
	if res := g.resolved(t); !res.granted || res.limit != limit0*2 {
		t.Fatalf("resolved %+v, want granted at the raised limit", res)
	}
}

// An event while one is pending asks nothing more.
func TestOneRequestAtATime(t *testing.T) {
	g := newRig(t, time.Minute)
	g.r.OOM(g.event(4))
	g.r.OOM(g.event(4))
	if len(g.link.reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(g.link.reqs))
	}
	g.r.Remove(7)
	g.r.OOM(g.event(4))
	if len(g.link.reqs) != 1 {
		t.Fatal("an event of a removed container was sent")
	}
}

// A rescue leaves one info line naming the container, its app, the bytes
// granted and the time to grant; a denial leaves none of that kind.
func TestRescueIsLoggedAtInfo(t *testing.T) {
	g := newRig(t, time.Minute)
	var buf syncBuffer
	g.r.log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g.c.App = "shop"
	g.r.OOM(g.event(256))
	const granted = limit0 + 256*4096
	g.link.answer(0, &pb.OomVerdict{Handle: 7, Granted: true, NewLimitBytes: granted})
	g.resolved(t)
	var rescued []string
	for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(ln, "OOM rescued") {
			rescued = append(rescued, ln)
		}
	}
	if len(rescued) != 1 {
		t.Fatalf("log %q: want one OOM rescued line", buf.String())
	}
	ln := rescued[0]
	for _, want := range []string{"level=INFO", "name=c7", "app=shop", "granted_bytes=1048576", "time_to_grant="} {
		if !strings.Contains(ln, want) {
			t.Errorf("rescue line %q lacks %q", ln, want)
		}
	}

	g.r.OOM(g.event(0))
	g.link.answer(1, &pb.OomVerdict{Handle: 7, Granted: false})
	g.resolved(t)
	if n := strings.Count(buf.String(), "OOM rescued"); n != 1 {
		t.Fatalf("after a denial %d rescue lines, want still 1", n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
