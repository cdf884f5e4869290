package mu

import (
	"container/heap"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// A pod kept saturated reports a confidence near 1 and a departure rate
// near its service rate; the same pod lightly loaded reports confidence 0.
func TestEstimatorSaturatedVsIdle(t *testing.T) {
	e := NewEstimator(EstimatorConfig{}, t0)
	now := t0
	exec := 100 * time.Millisecond // concurrency 1: capacity 10 req/s
	// Saturated: three requests always waiting.
	waiting := []*Ticket{e.Arrive(), e.Arrive(), e.Arrive()}
	for i := 0; i < 50; i++ {
		tk := waiting[0]
		waiting = append(waiting[1:], e.Arrive())
		q := e.Dequeue(tk)
		now = now.Add(exec)
		e.Respond(tk, exec, q)
		e.Advance(now)
	}
	m, _ := e.Snapshot()
	if m.Confidence < 0.9 {
		t.Fatalf("saturated pod: confidence %.2f, want ≥ 0.9", m.Confidence)
	}
	if math.Abs(m.Departure-10) > 1.5 {
		t.Fatalf("saturated pod: departure %.2f req/s, want ≈ 10", m.Departure)
	}
	if math.Abs(m.ExecSec-0.1) > 1e-6 {
		t.Fatalf("ET_avg %.4f, want 0.1", m.ExecSec)
	}

	// Light: one request every 500 ms, never a queue.
	l := NewEstimator(EstimatorConfig{}, t0)
	now = t0
	for i := 0; i < 20; i++ {
		tk := l.Arrive()
		q := l.Dequeue(tk)
		l.Respond(tk, exec, q)
		now = now.Add(500 * time.Millisecond)
		l.Advance(now)
	}
	m, _ = l.Snapshot()
	if m.Confidence != 0 {
		t.Fatalf("underloaded pod: confidence %.2f, want 0", m.Confidence)
	}
	if m.Departure < 1.5 || m.Departure > 2.5 {
		t.Fatalf("underloaded pod: departure %.2f, want ≈ 2 req/s", m.Departure)
	}
}

// A request that arrived behind a queue loses its flag when the queue
// drains while it runs (Algorithm 1 lines 10–12).
func TestEstimatorConfidenceResetOnDrain(t *testing.T) {
	e := NewEstimator(EstimatorConfig{}, t0)
	a, b := e.Arrive(), e.Arrive() // b sees a waiting: confidence 1
	qa := e.Dequeue(a)
	qb := e.Dequeue(b) // queue now 0
	e.Respond(a, time.Millisecond, qa)
	e.Respond(b, time.Millisecond, qb)
	e.Advance(t0.Add(2 * time.Second))
	if m, _ := e.Snapshot(); m.Confidence != 0 {
		t.Fatalf("confidence %.2f after the queue drained, want 0", m.Confidence)
	}
}

// T_c follows 10·ET_avg within [0.1 s, 10 s] and an idle pod halves it
// back towards 1 s.
func TestEstimatorAdaptiveInterval(t *testing.T) {
	e := NewEstimator(EstimatorConfig{}, t0)
	tk := e.Arrive()
	e.Respond(tk, 3*time.Second, e.Dequeue(tk))
	if _, tc := e.Snapshot(); tc != 10*time.Second {
		t.Fatalf("slow function: T_c %v, want 10s (capped)", tc)
	}
	now := t0
	// The first interval still holds the response; then it is idle.
	for _, want := range []time.Duration{10 * time.Second, 5 * time.Second, 2500 * time.Millisecond, 1250 * time.Millisecond, time.Second, time.Second} {
		_, tc := e.Snapshot()
		now = now.Add(tc)
		e.Advance(now)
		if _, got := e.Snapshot(); got != want {
			t.Fatalf("idle halving: T_c %v, want %v", got, want)
		}
	}
	if m, _ := e.Snapshot(); m.ExecSec != 0 || m.Departure != 0 {
		t.Fatalf("idle pod keeps ET %.3f, R_sd %.3f; want 0, 0", m.ExecSec, m.Departure)
	}
	f := NewEstimator(EstimatorConfig{}, t0)
	tk = f.Arrive()
	f.Respond(tk, 2*time.Millisecond, f.Dequeue(tk))
	if _, tc := f.Snapshot(); tc != 100*time.Millisecond {
		t.Fatalf("fast function: T_c %v, want 100ms (floor)", tc)
	}
}

// --- load balancer, in a discrete-event simulation of real queue proxies.

type event struct {
	at   float64
	kind int // 0 arrival, 1 completion
	pod  int
	tk   *Ticket
	q    int
	sent float64
	b    *Backend
	exec float64
}
type events []*event

func (h events) Len() int           { return len(h) }
func (h events) Less(i, j int) bool { return h[i].at < h[j].at }
func (h events) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)        { *h = append(*h, x.(*event)) }
func (h *events) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

type simPod struct {
	svc     float64 // mean service time, s
	busy    bool
	waiting []*event
	est     *Estimator
}

// simulateLB sends Poisson load at rps for dur seconds to pods with the
// given mean service times (concurrency 1, service uniform ±20 %) through a
// pool with the given policy; it returns the response times and how many
// requests each pod served. addAt adds pod addSvc at that time (<0: never).
func simulateLB(t *testing.T, policy string, svc []float64, rps, dur float64, addAt, addSvc float64, seed int64) ([]float64, []int) {
	t.Helper()
	pool, err := NewPool(policy, seed)
	if err != nil {
		t.Fatal(err)
	}
	pool.Concurrency = 1
	rng := rand.New(rand.NewSource(seed))
	var pods []*simPod
	ids := map[*Backend]int{}
	clock := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	addPod := func(s float64, now float64) {
		pods = append(pods, &simPod{svc: s, est: NewEstimator(EstimatorConfig{}, clock(now))})
		id := string(rune('a' + len(pods) - 1))
		pool.Add(id, id)
	}
	for _, s := range svc {
		addPod(s, 0)
	}
	h := &events{}
	for at := rng.ExpFloat64() / rps; at < dur; at += rng.ExpFloat64() / rps {
		heap.Push(h, &event{at: at})
	}
	added := addAt < 0
	var rts []float64
	served := make([]int, len(svc)+1)
	start := func(p *simPod, pi int, e *event, now float64) {
		p.busy = true
		e.q = p.est.Dequeue(e.tk)
		e.exec = (0.8 + 0.4*rng.Float64()) * p.svc // CPU-bound: ±20 %
		heap.Push(h, &event{at: now + e.exec, kind: 1, pod: pi, tk: e.tk, q: e.q, sent: e.sent, b: e.b, exec: e.exec})
	}
	for h.Len() > 0 {
		e := heap.Pop(h).(*event)
		if !added && e.at >= addAt {
			addPod(addSvc, e.at)
			added = true
		}
		for _, p := range pods {
			p.est.Advance(clock(e.at))
		}
		switch e.kind {
		case 0:
			b := pool.Pick()
			pi, ok := ids[b]
			if !ok {
				pi = int(b.ID[0] - 'a')
				ids[b] = pi
			}
			p := pods[pi]
			e.tk, e.sent, e.b, e.pod = p.est.Arrive(), e.at, b, pi
			if p.busy {
				p.waiting = append(p.waiting, e)
			} else {
				start(p, pi, e, e.at)
			}
		case 1:
			p := pods[e.pod]
			m := p.est.Respond(e.tk, time.Duration(e.exec*float64(time.Second)), e.q)
			pool.Done(e.b, &m)
			rts = append(rts, e.at-e.sent)
			served[e.pod]++
			p.busy = false
			if len(p.waiting) > 0 {
				n := p.waiting[0]
				p.waiting = p.waiting[1:]
				start(p, e.pod, n, e.at)
			}
		}
	}
	sort.Float64s(rts)
	return rts, served
}

func p99(s []float64) float64 { return s[int(0.99*float64(len(s)-1))] }

// Two fast and two slow pods (§3.4.1's experiment, fast twice as fast):
// Mu's estimated-response-time policy sends more to the fast pods and has
// a lower tail than round-robin, least-connections and p2c.
func TestMuBalancerBeatsBaselinesOnHeterogeneousPods(t *testing.T) {
	svc := []float64{0.05, 0.05, 0.1, 0.1} // capacity 20+20+10+10 = 60 req/s
	res := map[string]float64{}
	for _, pol := range LBPolicies {
		var worst float64
		for seed := int64(1); seed <= 3; seed++ {
			rts, served := simulateLB(t, pol, svc, 48, 300, -1, 0, seed)
			worst = max(worst, p99(rts))
			if pol == LBMu && served[0]+served[1] < 3*(served[2]+served[3])/2 {
				t.Fatalf("mu: fast pods served %d, slow %d; want fast ≥ 1.5× slow", served[0]+served[1], served[2]+served[3])
			}
		}
		res[pol] = worst
	}
	t.Logf("p99 (s, worst of 3 seeds): %v", res)
	for _, pol := range []string{LBRoundRob, LBP2C} {
		if res[LBMu] >= res[pol] {
			t.Fatalf("mu p99 %.3fs not below %s p99 %.3fs", res[LBMu], pol, res[pol])
		}
	}
	if res[LBMu] > 1.1*res[LBLeastConn] {
		t.Fatalf("mu p99 %.3fs above leastconn %.3fs by more than 10%%", res[LBMu], res[LBLeastConn])
	}
}

// A pod added to a loaded pool gets requests at once but not all of them:
// in the 2 s after it joins it takes more than a fair share and less than
// all (no herding).
func TestMuBalancerRampsNewPodWithoutHerding(t *testing.T) {
	pool, _ := NewPool(LBMu, 1)
	for _, id := range []string{"a", "b", "c"} {
		pool.Add(id, id)
	}
	// Old pods: capacity 10 req/s each, 5 requests in flight each.
	old := map[string]*Backend{}
	for i := 0; i < 15; i++ {
		b := pool.Pick()
		old[b.ID] = b
	}
	for _, b := range old {
		pool.Done(b, &PodMetrics{Queue: 4, Departure: 10, Confidence: 1})
		pool.Pick() // keep 5 in flight
	}
	pool.Add("new", "new")
	got := map[string]int{}
	for i := 0; i < 12; i++ {
		got[pool.Pick().ID]++
	}
	if got["new"] == 0 || got["new"] == 12 {
		t.Fatalf("new pod took %d of 12 requests: want some but not all (%v)", got["new"], got)
	}
	if got["new"] < 5 {
		t.Fatalf("new pod took %d of 12: want it to catch up with the loaded pods first (%v)", got["new"], got)
	}
	st := pool.Stats()
	if st[3].Capacity != 0 || pool.Capacity() != 10 {
		t.Fatalf("new pod capacity %.1f (want unknown, defaulting to the max seen); pool Cap_e %.1f, want 10", st[3].Capacity, pool.Capacity())
	}
}

// The capacity estimate only moves on a sample at least as confident or
// as fast as the saved one (§3.4.1), and a low-confidence sample reads as
// spare capacity.
func TestPoolCapacityEstimate(t *testing.T) {
	pool, _ := NewPool(LBMu, 1)
	pool.Add("a", "a")
	b := pool.Pick()
	pool.Done(b, &PodMetrics{Departure: 5, Confidence: 0.5})
	if c := pool.Capacity(); c != 10 {
		t.Fatalf("Cap = R/Ratio = %v, want 10", c)
	}
	b = pool.Pick()
	pool.Done(b, &PodMetrics{Departure: 2, Confidence: 0.2}) // arrivals fell: ignore
	if c := pool.Capacity(); c != 10 {
		t.Fatalf("a falling arrival rate changed Cap to %v, want 10", c)
	}
	// Saturated, but the (EWMA) departure rate is still rising from the
	// saved 5: it has not caught up with the pod's capacity yet, so it is
	// no evidence of less than 10.
	b = pool.Pick()
	pool.Done(b, &PodMetrics{Departure: 8, Confidence: 1})
	if c := pool.Capacity(); c != 10 {
		t.Fatalf("saturated, departure still rising 5 → 8: Cap %v, want 10 (held)", c)
	}
	// Saturated at a departure rate that stopped rising (8 → 7): the
	// pod shows its capacity, ½·10 + ½·(7/1) = 8.5.
	b = pool.Pick()
	pool.Done(b, &PodMetrics{Departure: 7, Confidence: 1})
	if c := pool.Capacity(); c != 8.5 {
		t.Fatalf("saturated, departure no longer rising: Cap %v, want 8.5 (half way from 10 to 7)", c)
	}
	if _, err := NewPool("nope", 1); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func TestBaselinePolicies(t *testing.T) {
	rr, _ := NewPool(LBRoundRob, 1)
	lc, _ := NewPool(LBLeastConn, 1)
	p2, _ := NewPool(LBP2C, 1)
	for _, p := range []*Pool{rr, lc, p2} {
		p.Add("a", "a")
		p.Add("b", "b")
		p.Add("c", "c")
	}
	var seq string
	for i := 0; i < 6; i++ {
		seq += rr.Pick().ID
	}
	if seq != "abcabc" {
		t.Fatalf("round-robin order %q", seq)
	}
	// Least-connections: a request finishing on b makes b next.
	for i := 0; i < 3; i++ {
		lc.Pick()
	}
	for _, s := range lc.Stats() {
		if s.Inflight != 1 {
			t.Fatalf("leastconn spread %+v", lc.Stats())
		}
	}
	var bb *Backend
	for _, s := range lc.bs {
		if s.ID == "b" {
			bb = s
		}
	}
	lc.Done(bb, nil)
	if got := lc.Pick().ID; got != "b" {
		t.Fatalf("leastconn picked %s, want b", got)
	}
	// p2c never picks the most loaded pod of three when the other two
	// are idle.
	for i := 0; i < 10; i++ {
		p2.bs[0].inflight = 100
		p2.bs[1].inflight, p2.bs[2].inflight = 0, 0
		if p2.Pick().ID == "a" && p2.bs[0].inflight > 100 {
			t.Fatal("p2c picked the loaded pod")
		}
	}
}

// --- predictor

// On a trend the regressions beat the naive predictor; on a constant
// rate they predict the constant.
func TestPredictorLearnsTrendAndPeriod(t *testing.T) {
	cfg := PredictorConfig{Windows: []int{10, 50}, Rates: []float64{1e-1, 1e-2, 1e-3}, Alpha: 0.99}
	p := NewPredictor(cfg)
	var errP, errN float64
	rate := func(i int) float64 { return 200 + 150*math.Sin(2*math.Pi*float64(i)/40) }
	prev, pred := 0.0, 0.0
	for i := 0; i < 2000; i++ {
		r := rate(i)
		if i >= 1000 {
			errP += math.Abs(r - pred)
			errN += math.Abs(r - prev)
		}
		pred = p.Observe(r)
		prev = r
	}
	if errP >= 0.7*errN {
		t.Fatalf("periodic load: predictor error %.0f not 30%% below naive %.0f", errP, errN)
	}
	c := NewPredictor(cfg)
	var last float64
	for i := 0; i < 300; i++ {
		last = c.Observe(100)
	}
	if math.Abs(last-100) > 1 {
		t.Fatalf("constant 100 req/s predicted as %.2f", last)
	}
	if got := c.Observe(math.NaN()); math.IsNaN(got) || got < 0 {
		t.Fatalf("NaN input gave %v", got)
	}
}

// --- autoscalers

func TestMuAutoscalerEquations(t *testing.T) {
	a := NewMuAutoscaler(MuConfig{SLO: time.Second, Grace: 3})
	// IR 250 req/s, Cap_e 100: N_IR = 3. 60 queued, ET 0.4 s:
	// N_Queue = ⌈60/(100·0.6)⌉ = 1. N_des = 4, within 2·N_cur.
	o := Observation{Ready: 3, Arrivals: 500, EpochSec: 2, Queued: 60, CapE: 100, ExecSec: 0.4}
	if got := a.Desired(o); got != 4 {
		t.Fatalf("Eqs 1–3: N_des %d, want 4", got)
	}
	o.Ready, o.Arrivals = 1, 2000 // N_des 11, capped at 2·1 (Eq 4)
	if got := a.Desired(o); got != 2 {
		t.Fatalf("Eq 4: %d, want 2", got)
	}
	o.Ready = 0
	if got := a.Desired(o); got != 1 {
		t.Fatalf("from zero: %d, want 1", got)
	}
	// Cold start: 2 replicas starting, none has answered (no Cap_e, no
	// ET_avg), 60 requests held at the gateway. Nothing to size Eqs 1–2
	// with, so N_des stays at the 2 already ordered (before: Cap_e taken
	// as 1 req/s gave N_IR 25 + N_Queue 60, and Eq 4 doubled to 4).
	cold := NewMuAutoscaler(MuConfig{SLO: time.Second})
	if got := cold.Desired(Observation{Ready: 2, Arrivals: 50, EpochSec: 2, Queued: 60}); got != 2 {
		t.Fatalf("cold start without Cap_e: %d, want the 2 starting", got)
	}
	if got := cold.Desired(Observation{Ready: 0, Arrivals: 3, EpochSec: 2, Queued: 3}); got != 1 {
		t.Fatalf("cold start from zero without Cap_e: %d, want 1", got)
	}
	// Once one answers (Cap_e 20, ET 0.1 s), Eqs 1–4 apply again:
	// N_IR ⌈25/20⌉ = 2, N_Queue ⌈60/(20·0.9)⌉ = 4, N_des 6 ≤ 2·2 → 4.
	if got := cold.Desired(Observation{Ready: 2, Arrivals: 50, EpochSec: 2, Queued: 60, CapE: 20, ExecSec: 0.1}); got != 4 {
		t.Fatalf("after the first report: %d, want 4", got)
	}
	// Scale-down waits Grace epochs below N_cur, then implements N_des.
	o = Observation{Ready: 6, Arrivals: 200, EpochSec: 2, CapE: 100}
	for i, want := range []int{6, 6, 1} {
		if i == 1 {
			o.Arrivals = 300 // N_des 2, still below N_cur
		} else {
			o.Arrivals = 200
		}
		if got := a.Desired(o); got != want {
			t.Fatalf("epoch %d of the grace period: %d, want %d", i, got, want)
		}
	}
	// A scale-up in the grace window resets it.
	b := NewMuAutoscaler(MuConfig{SLO: time.Second, Grace: 2})
	b.Desired(Observation{Ready: 4, Arrivals: 100, EpochSec: 2, CapE: 100})
	b.Desired(Observation{Ready: 4, Arrivals: 1000, EpochSec: 2, CapE: 100})
	if got := b.Desired(Observation{Ready: 5, Arrivals: 100, EpochSec: 2, CapE: 100}); got != 5 {
		t.Fatalf("grace not reset by a scale-up: %d", got)
	}
}

// Mu's replica target is Eq 1 + Eq 2 at the estimated capacity itself:
// no target utilisation (Mu §3.3 gives none), unlike Knative's KPA,
// whose rps target is the capacity × 0.7. At 140 req/s on 20 req/s
// replicas, no queue: Mu 7, the KPA ⌈140/14⌉ = 10. One request queued
// adds a replica (Eq 2's ceiling); a full SLO's worth
// (Cap_e·(SLO − ET_avg) = 18) still one, 19 two.
func TestMuTargetIsEq1PlusEq2WithoutHeadroom(t *testing.T) {
	o := Observation{Ready: 8, Arrivals: 280, EpochSec: 2, CapE: 20, ExecSec: 0.1}
	for _, c := range []struct {
		queued float64
		nQ     int
	}{{0, 0}, {1, 1}, {18, 1}, {19, 2}} {
		a := NewMuAutoscaler(MuConfig{SLO: time.Second, Grace: 1})
		o.Queued = c.queued
		got := a.Desired(o)
		nIR, nQ := a.Terms()
		if nIR != 7 || nQ != c.nQ || got != 7+c.nQ {
			t.Errorf("queued %.0f: N_IR %d, N_Queue %d, N_des %d; want 7, %d, %d", c.queued, nIR, nQ, got, c.nQ, 7+c.nQ)
		}
	}
	k, err := NewKPA(KPAConfig{Metric: ASRPS, Target: 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Desired(Observation{Ready: 10, Arrivals: 280, EpochSec: 2}); got != 10 {
		t.Fatalf("KPA rps at target 20 × 0.7: %d, want 10", got)
	}
}

func TestKPAStableAndPanic(t *testing.T) {
	k, err := NewKPA(KPAConfig{Metric: ASRPS, Target: 10})
	if err != nil {
		t.Fatal(err)
	}
	// 70 req/s for a minute: 70/(10·0.7) = 10 pods.
	var d int
	for i := 0; i < 30; i++ {
		d = k.Desired(Observation{Ready: 10, Arrivals: 140, EpochSec: 2})
	}
	if d != 10 {
		t.Fatalf("stable: %d pods, want 10", d)
	}
	// A burst to 350 req/s: the 6 s panic window sees it within a few
	// epochs, the stable window would not; desired/ready ≥ 2 → panic.
	var panicked int
	for i := 0; i < 3; i++ {
		panicked = k.Desired(Observation{Ready: 10, Arrivals: 700, EpochSec: 2})
	}
	if !k.panicking || panicked < 20 {
		t.Fatalf("burst: panicking=%v, %d pods; want panic and ≥ 20", k.panicking, panicked)
	}
	// Load drops: no scale-down while in panic.
	after := k.Desired(Observation{Ready: panicked, Arrivals: 20, EpochSec: 2})
	if after < panicked {
		t.Fatalf("scaled down in panic: %d < %d", after, panicked)
	}
	c, _ := NewKPA(KPAConfig{Metric: ASConcurrency, Target: 10})
	if d := c.Desired(Observation{Ready: 1, Concurrency: 14}); d != 2 {
		t.Fatalf("concurrency 14, target 10·0.7: %d pods, want 2", d)
	}
	if _, err := NewKPA(KPAConfig{Metric: "cpu", Target: 1}); err == nil {
		t.Fatal("unknown metric accepted")
	}
	if _, err := NewAutoscaler("x", MuConfig{}, 1); err == nil {
		t.Fatal("unknown autoscaler accepted")
	}
}

func TestEq7(t *testing.T) {
	m := MaxMin(10, []float64{2, 8, 5})
	if m[0] != 2 || m[1] != 4 || m[2] != 4 {
		t.Fatalf("MaxMin(10, 2 8 5) = %v, want 2 4 4", m)
	}
	// Max-min itself is perfectly fair; all demand unmet but 10.
	u, i := Eq7(10, []float64{2, 8, 5}, m)
	if u != 0 || math.Abs(i-5.0/3) > 1e-9 {
		t.Fatalf("U %.3f I %.3f, want 0 and 1.667", u, i)
	}
	if u, _ := Eq7(10, []float64{2, 8, 5}, []float64{0, 8, 2}); math.Abs(u-(2+4+2)/3.0) > 1e-9 {
		t.Fatalf("U %.3f, want 2.667", u)
	}
}

// Before a function's replicas have reported anything, PickFree fills each
// to its concurrency and then refuses (the gateway holds the request), and
// BestResponse has nothing to say. The first execution time reported gives
// every pod Little's-law capacity, concurrency/ET, until Algorithm 1's
// departure rate arrives.
func TestPickFreeAndLittlesLawPrior(t *testing.T) {
	pool, _ := NewPool(LBMu, 1)
	pool.Concurrency = 2
	pool.Add("a", "a")
	pool.Add("b", "b")
	var got []*Backend
	for range 4 {
		b := pool.PickFree()
		if b == nil {
			t.Fatalf("PickFree refused with %d of 4 slots taken", len(got))
		}
		got = append(got, b)
	}
	if b := pool.PickFree(); b != nil {
		t.Fatalf("PickFree sent a fifth request to %s, past both pods' concurrency", b.ID)
	}
	if pool.Known() {
		t.Fatal("known before any answer")
	}
	if _, ok := pool.BestResponse(); ok {
		t.Fatal("BestResponse estimated with nothing reported")
	}
	pool.Done(got[0], &PodMetrics{ExecSec: 0.5}) // no departure rate yet
	if !pool.Known() {
		t.Fatal("an execution time was reported, still unknown")
	}
	// a: 1 in flight, b: 2; Cap = 2/0.5 = 4 req/s each → (1+1)/4.
	if sec, ok := pool.BestResponse(); !ok || sec != 0.5 {
		t.Fatalf("BestResponse = %v, %v; want 0.5 s from Little's law", sec, ok)
	}
}
