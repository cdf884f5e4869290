package gateway

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/queueproxy"
	"github.com/escra-dev/escra/controller/placement"
)

// procScaler runs replicas as in-process queue proxies in front of a
// sleeping handler: a stand-in for the controller only in these unit tests
// of the gateway's own logic (the e2e test uses the real controller).
type procScaler struct {
	mu      sync.Mutex
	ceiling int
	work    time.Duration
	srvs    map[string]*http.Server
	adds    int
	removes int
	nodes   []*placement.Node
	hosts   []string  // the host of each Add, in order
	refuse  string    // a host whose Adds fail
	left    []Replica // what Existing reports: replicas of an earlier gateway
}

func (p *procScaler) Existing(context.Context, *Function) ([]Replica, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.left), nil
}

func (p *procScaler) Ceiling(context.Context, *Function) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ceiling, nil
}
func (p *procScaler) Nodes(context.Context) ([]*placement.Node, error) { return p.nodes, nil }

func (p *procScaler) Add(_ context.Context, f *Function, host string) (Replica, error) {
	p.mu.Lock()
	p.hosts = append(p.hosts, host)
	refused := host != "" && host == p.refuse
	p.mu.Unlock()
	if refused {
		return Replica{}, fmt.Errorf("host %s has no room", host)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(p.work)
		fmt.Fprintln(w, "done", r.URL.Path)
	}))
	qp, err := queueproxy.New(up.URL, f.Concurrency, 100)
	if err != nil {
		return Replica{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Replica{}, err
	}
	srv := &http.Server{Handler: qp}
	go srv.Serve(ln)
	srv.RegisterOnShutdown(up.Close)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adds++
	id := fmt.Sprintf("r%d", p.adds)
	if p.srvs == nil {
		p.srvs = map[string]*http.Server{}
	}
	p.srvs[id] = srv
	return Replica{ID: id, Addr: ln.Addr().String()}, nil
}

func (p *procScaler) Remove(_ context.Context, _ *Function, id string) error {
	p.mu.Lock()
	s := p.srvs[id]
	delete(p.srvs, id)
	p.removes++
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
	return nil
}

func (p *procScaler) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.srvs {
		s.Close()
	}
}

func testFn(as string) Function {
	return Function{Name: "hello", CPUCores: 0.5, MemoryBytes: 64 << 20, Concurrency: 2, SLO: time.Second,
		Autoscaler: as, LB: mu.LBMu, KPATarget: 5, Grace: 2}
}

// The first request to a function with no replica is held until one is
// ready, then answered; the client never sees the piggybacked headers.
func TestScaleFromZeroAndHeadersStripped(t *testing.T) {
	sc := &procScaler{ceiling: 4, work: 10 * time.Millisecond}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	resp, err := http.Get(front.URL + "/fn/hello/work")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "done /work") {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	for h := range resp.Header {
		if strings.HasPrefix(h, "X-Mu-") {
			t.Fatalf("client saw piggybacked header %s", h)
		}
	}
	if st := g.Statuses()[0]; st.Ready != 1 || st.Served != 1 {
		t.Fatalf("after scale from zero: %+v", st)
	}
	// Unknown function: 404 with one line.
	resp, _ = http.Get(front.URL + "/fn/nope/x")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown function: %d", resp.StatusCode)
	}
	g.wg.Wait()
}

// Under load the Mu autoscaler adds replicas, never beyond the budget's
// ceiling, and with the load gone removes them after the grace period.
func TestEpochScalingWithinCeiling(t *testing.T) {
	sc := &procScaler{ceiling: 3, work: 50 * time.Millisecond}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMuNoPred)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.epoch = 200 * time.Millisecond // a short epoch for the test; rates are per second
	front := httptest.NewServer(g)
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	// 8 clients in closed loop: far more than one replica at
	// concurrency 2 and 50 ms (40 req/s) serves within budget.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, err := http.Get(front.URL + "/fn/hello/"); err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for g.Statuses()[0].Ready < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	st := g.Statuses()[0]
	if st.Ready != 3 {
		t.Fatalf("under load: %d replicas ready, want the ceiling 3 (%+v)", st.Ready, st)
	}
	if sc.adds > 3 {
		t.Fatalf("created %d replicas, ceiling 3", sc.adds)
	}
	deadline = time.Now().Add(20 * time.Second)
	for g.Statuses()[0].Ready > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if r := g.Statuses()[0].Ready; r > 1 {
		t.Fatalf("idle: still %d replicas after the grace period", r)
	}
	cancel()
	<-done
}

// Mu answers 503 to a request that would miss the SLO behind the queues
// it sees, whether or not the budget caps the function (§4.1: the 503s
// come during bursts before new pods are up); "capped" keeps the older,
// narrower reading; the Knative baselines queue instead.
func TestAdmission(t *testing.T) {
	sc := &procScaler{ceiling: 1, work: 0}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	g.kick(st)
	g.wg.Wait()
	b := st.pool.Pick()
	if g.reject(st, 0) {
		t.Fatal("rejected before the replica had a capacity estimate")
	}
	// The replica reports 2 req/s capacity, 10 queued: (10+1)/2 s > 1 s.
	st.pool.Done(b, &mu.PodMetrics{Queue: 10, Departure: 2, Confidence: 1})
	if !g.reject(st, 0) {
		t.Fatal("a 5.5 s estimated response for a 1 s SLO was admitted, with the function not capped")
	}
	st.pool.Done(b, &mu.PodMetrics{Queue: 0, Departure: 2.5, Confidence: 1})
	if g.reject(st, 0) {
		t.Fatal("rejected with an empty queue")
	}
	// The same queue, for a request that already waited 700 ms of its 1 s
	// SLO at the gateway: (0+1)/2.5 = 400 ms more is too late.
	if !g.reject(st, 700*time.Millisecond) {
		t.Fatal("admitted a request whose wait at the gateway leaves less than its estimated response")
	}
	st.pool.Done(b, &mu.PodMetrics{Queue: 10, Departure: 3, Confidence: 1})
	st.spec.Admission = AdmitCapped
	if g.reject(st, 0) {
		t.Fatal(`admission "capped" rejected while the function was not capped`)
	}
	st.mu.Lock()
	st.capped = true
	st.mu.Unlock()
	if !g.reject(st, 0) {
		t.Fatal(`admission "capped" admitted a late request while capped`)
	}
	st.spec.Admission = AdmitOff
	if g.reject(st, 0) {
		t.Fatal(`admission "off" rejected`)
	}
	st.spec.Admission, st.spec.Autoscaler = "", mu.ASRPS
	if g.reject(st, 0) {
		t.Fatal("the rps baseline rejected: by default only Mu has admission")
	}
	f := testFn(mu.ASMu)
	f.Admission = "sometimes"
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "admission") {
		t.Fatalf("admission %q accepted: %v", f.Admission, err)
	}
}

func TestFunctionValidation(t *testing.T) {
	f := testFn(mu.ASMu)
	f.LB = "random"
	if _, err := New([]Function{f}, &procScaler{}, nil); err == nil || !strings.Contains(err.Error(), "lb") {
		t.Fatalf("bad lb: %v", err)
	}
	f = testFn(mu.ASRPS)
	f.KPATarget = 0
	if err := f.Validate(); err == nil {
		t.Fatal("rps without a target accepted")
	}
	if m := parseMetrics(http.Header{mu.HeaderQueue: {"-1"}, mu.HeaderExecMs: {"1"}, mu.HeaderDeparture: {"1"}, mu.HeaderConfidence: {"0.5"}}); m != nil {
		t.Fatal("negative queue accepted")
	}
	if m := parseMetrics(http.Header{mu.HeaderQueue: {"1"}, mu.HeaderExecMs: {"NaN"}, mu.HeaderDeparture: {"1"}, mu.HeaderConfidence: {"0.5"}}); m != nil {
		t.Fatal("NaN accepted")
	}
}

// Eq 7 on the real allocation: one 1-core node, two functions asking 4
// replicas of 0.5 cores each; one has 2 ready, the other none. Max-min
// gives each 0.5 cores: U = (|1−0.5| + |0−0.5|)/2 = 0.5; unmet demand
// I = |4 − 1|/2 = 1.5.
func TestFairnessOfRealAllocation(t *testing.T) {
	sc := &procScaler{ceiling: 4, nodes: []*placement.Node{{Name: "n", CPUCap: 1}}}
	a, b := testFn(mu.ASMu), testFn(mu.ASMu)
	b.Name = "other"
	g, err := New([]Function{a, b}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	st.ready["r1"], st.ready["r2"] = Replica{}, Replica{}
	g.fairness(context.Background(), map[string]int{"hello": 4, "other": 4})
	u, i, ua, ia := g.Fairness()
	if math.Abs(u-0.5) > 1e-9 || math.Abs(i-1.5) > 1e-9 || ua != u || ia != i {
		t.Fatalf("U %.3f I %.3f (avg %.3f %.3f), want 0.5 and 1.5", u, i, ua, ia)
	}
	// After a reset only later epochs count: each function now has 1 of
	// 4, its max-min share: U = 0, I = |4 − 1|/2 = 1.5.
	g.ResetFairness()
	if _, _, ua, ia := g.Fairness(); ua != 0 || ia != 0 {
		t.Fatalf("averages %.3f %.3f right after a reset, want none", ua, ia)
	}
	delete(st.ready, "r2")
	g.fns["other"].ready["o1"] = Replica{}
	g.fairness(context.Background(), map[string]int{"hello": 4, "other": 4})
	if _, _, ua, ia := g.Fairness(); math.Abs(ua) > 1e-9 || math.Abs(ia-1.5) > 1e-9 {
		t.Fatalf("averages after the reset %.3f %.3f, want 0 and 1.5 (the epoch before the reset counted)", ua, ia)
	}
}

// Granted replicas are created on the nodes Algorithm 3's node selection
// picks: worst fit on the emptier node, best fit on the fuller one; with
// "controller" the deployer chooses (no host); a host that refuses gets
// the replica placed by the controller instead of losing it; the first
// replica of a function at zero is placed by the node selection too.
func TestGrantedReplicasGoWhereNodeSelectionSays(t *testing.T) {
	nodes := func() []*placement.Node {
		return []*placement.Node{
			{Name: "roomy", CPUCap: 4, CPUFree: 4, MemCap: 8 << 30, MemFree: 8 << 30, AppCount: map[string]int{}},
			{Name: "busy", CPUCap: 4, CPUFree: 1.5, MemCap: 8 << 30, MemFree: 8 << 30, AppCount: map[string]int{}},
		}
	}
	for _, tc := range []struct {
		sel, refuse string
		want        []string
	}{
		{"worstfit", "", []string{"roomy", "roomy", "roomy"}},
		{"bestfit", "", []string{"busy", "busy", "busy"}},
		{NodeSelectController, "", []string{"", "", ""}},
		{"bestfit", "busy", []string{"", "", "", "busy", "busy", "busy"}},
	} {
		t.Run(tc.sel+"/"+tc.refuse, func(t *testing.T) {
			sc := &procScaler{ceiling: 4, nodes: nodes(), refuse: tc.refuse}
			defer sc.closeAll()
			g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.SetNodeSelect(tc.sel); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"hello": 3}
			granted, hosts := g.grant(context.Background(), want)
			if granted["hello"] != 3 {
				t.Fatalf("granted %d replicas, want 3", granted["hello"])
			}
			g.reconcile(g.fns["hello"], 3, granted["hello"], hosts["hello"])
			g.wg.Wait()
			sc.mu.Lock()
			got := slices.Clone(sc.hosts)
			sc.mu.Unlock()
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("adds went to %q, want %q", got, tc.want)
			}
			if r := g.Statuses()[0].Ready; r != 3 {
				t.Fatalf("%d replicas ready, want 3", r)
			}
		})
	}
	// Scale from zero: the first replica, made for a held request outside
	// the epoch, goes where the node selection says too.
	sc := &procScaler{ceiling: 4, nodes: nodes()}
	defer sc.closeAll()
	g, _ := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err := g.SetNodeSelect("bestfit"); err != nil {
		t.Fatal(err)
	}
	g.kick(g.fns["hello"])
	g.wg.Wait()
	if !slices.Equal(sc.hosts, []string{"busy"}) {
		t.Fatalf("the first replica went to %q, want [busy]", sc.hosts)
	}
	if err := g.SetNodeSelect("firstfit"); err == nil {
		t.Fatal("an unknown node selection was accepted")
	}
}

// A gateway restarted after a crash serves with the replicas its
// predecessor left running (no cold start, no new container) and removes
// the leftovers that do not answer.
func TestAdoptTakesOverLiveReplicasAndRemovesDeadOnes(t *testing.T) {
	sc := &procScaler{ceiling: 4}
	defer sc.closeAll()
	f := testFn(mu.ASMu)
	var live []Replica
	for range 2 {
		r, err := sc.Add(context.Background(), &f, "")
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, r)
	}
	sc.left = append(live, Replica{ID: "dead", Addr: "127.0.0.1:1"}, Replica{ID: "older-format"})
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.AdoptTimeout = 300 * time.Millisecond
	if err := g.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := g.Statuses()[0]; st.Ready != 2 {
		t.Fatalf("adopted %d replicas, want the 2 live ones: %+v", st.Ready, st)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	for range 4 {
		resp, err := http.Get(front.URL + "/fn/hello/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request after adoption: %d", resp.StatusCode)
		}
	}
	sc.mu.Lock()
	adds, removes, running := sc.adds, sc.removes, len(sc.srvs)
	sc.mu.Unlock()
	if adds != 2 || removes != 2 || running != 2 {
		t.Fatalf("%d adds (want the 2 before the restart), %d removes (want the dead and the unaddressed one), %d live replicas (want 2)", adds, removes, running)
	}
}

// Before any replica has answered, the gateway knows nothing of the
// function's speed: like Knative's activator it sends a replica at most
// its concurrency and holds the rest, instead of queueing them all at the
// first replica while later ones stand idle (Table 5's cold start put
// requests 13 s deep in one queue).
func TestColdStartHoldsRequestsBeyondConcurrency(t *testing.T) {
	sc := &procScaler{ceiling: 4, work: 3 * time.Second}
	defer sc.closeAll()
	f := testFn(mu.ASRPS) // no admission: every request is eventually sent
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	g.kick(st)
	g.wg.Wait()
	front := httptest.NewServer(g)
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 6 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/fn/hello/x", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	// Timing only decides whether there is anything to judge: a replica
	// that answered (3 s of work) before the check makes the rest moot.
	stalled := func() {
		if st.pool.Known() {
			t.Skip("the replica answered before the check (3 s of work): the machine stalled; nothing to judge")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		in := st.inflight
		st.mu.Unlock()
		if in == 6 {
			break
		}
		stalled()
		if time.Now().After(deadline) {
			t.Fatalf("%d of 6 requests reached the gateway", in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let any wrongly sent request be counted
	sent := 0
	for _, b := range st.pool.Stats() {
		sent += b.Inflight
	}
	stalled()
	if sent != f.Concurrency {
		t.Fatalf("%d requests sent to the one replica before it answered, want its concurrency %d (the rest held at the gateway)", sent, f.Concurrency)
	}
	// A second replica takes held requests at once.
	st.mu.Lock()
	st.pending++
	st.mu.Unlock()
	g.wg.Add(1)
	g.addOne(st, "")
	deadline = time.Now().Add(10 * time.Second)
	for sent < 2*f.Concurrency && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		sent = 0
		for _, b := range st.pool.Stats() {
			sent += b.Inflight
		}
	}
	stalled()
	if sent != 2*f.Concurrency {
		t.Fatalf("with a second replica, %d requests in flight, want %d", sent, 2*f.Concurrency)
	}
}

// The controller scaler reads a leftover replica's address from its name
// (<prefix><function>-<queue proxy port>), returns names of ours that hold
// no port of ours without an address (to be removed), leaves other
// containers of the app alone, and never hands an adopted port out again.
func TestControllerScalerExistingReadsPortsFromNames(t *testing.T) {
	ctrl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/containers" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `[{"app":"hello","name":"mu-hello-20004"},{"app":"hello","name":"mu-hello-3"},
			{"app":"hello","name":"mu-hello-20005"},{"app":"hello","name":"user-sidecar"},
			{"app":"hello","name":"mu-hello-x"},{"app":"other","name":"mu-hello-20008"}]`)
	}))
	defer ctrl.Close()
	cl, err := adminclient.New(ctrl.URL)
	if err != nil {
		t.Fatal(err)
	}
	sc := &ControllerScaler{Client: cl, Prefix: "mu-", BasePort: 20000}
	f := testFn(mu.ASMu)
	got, err := sc.Existing(context.Background(), &f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Replica{{ID: "mu-hello-20004", Addr: "127.0.0.1:20004"}, {ID: "mu-hello-3"}, {ID: "mu-hello-20005"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Existing = %+v, want %+v", got, want)
	}
	var ports []int
	for range 3 {
		p, _ := sc.ports()
		ports = append(ports, p)
	}
	if !slices.Equal(ports, []int{20000, 20002, 20006}) {
		t.Fatalf("new replicas got ports %v, want 20000, 20002, 20006 (20004 is adopted)", ports)
	}
}

// initial_scale: Prescale starts the replicas before any request and
// returns once they are ready; the first request goes to a warm replica
// (no replica is added for it), adopted replicas count, the budget caps
// it, and a negative or above-max scale is refused.
func TestPrescaleStartsInitialReplicasBeforeTheFirstRequest(t *testing.T) {
	sc := &procScaler{ceiling: 8, work: 5 * time.Millisecond}
	defer sc.closeAll()
	f := testFn(mu.ASMu)
	f.InitialScale = 3
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g.Statuses()[0]; st.Ready != 3 || st.Pending != 0 {
		t.Fatalf("after Prescale: %d ready, %d pending; want 3, 0", st.Ready, st.Pending)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	resp, err := http.Get(front.URL + "/fn/hello/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sc.mu.Lock()
	adds := sc.adds
	sc.mu.Unlock()
	if resp.StatusCode != 200 || adds != 3 {
		t.Fatalf("first request: %d, replicas added %d; want 200 and the 3 initial ones only", resp.StatusCode, adds)
	}
	// A second Prescale adds nothing: the replicas there count.
	if err := g.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	sc.mu.Lock()
	adds = sc.adds
	sc.mu.Unlock()
	if adds != 3 {
		t.Fatalf("second Prescale added %d replicas", adds-3)
	}

	// The budget caps the initial scale.
	small := &procScaler{ceiling: 2, work: 5 * time.Millisecond}
	defer small.closeAll()
	g2, err := New([]Function{f}, small, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g2.Statuses()[0]; st.Ready != 2 {
		t.Fatalf("budget of 2, initial_scale 3: %d ready", st.Ready)
	}

	for _, bad := range []Function{{InitialScale: -1}, {InitialScale: 5, MaxReplicas: 4}} {
		x := testFn(mu.ASMu)
		x.InitialScale, x.MaxReplicas = bad.InitialScale, bad.MaxReplicas
		if err := x.Validate(); err == nil || !strings.Contains(err.Error(), "initial_scale") {
			t.Fatalf("initial_scale %d, max %d: %v", bad.InitialScale, bad.MaxReplicas, err)
		}
	}
}
