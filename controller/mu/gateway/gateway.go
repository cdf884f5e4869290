// Package gateway is escra-gateway's core: Mu's ingress (seed 003 §3):
// it routes each request to a function, picks a replica with the
// function's load balancer, strips the queue proxy's piggybacked metrics
// before the client sees them, and every epoch (2 s) asks the function's
// autoscaler how many replicas it needs, caps that by the app budget and,
// across functions, by DRF placement (Algorithm 3), and has a Scaler
// create or remove replicas. When a function cannot have what it needs,
// requests that would miss the SLO get 503 (admission, §4.1).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

// Function is one routed function and its policies.
type Function struct {
	Name        string        `json:"name"`
	Image       string        `json:"image"`
	CPUCores    float64       `json:"cpu_cores"`    // per replica, bootstrap
	MemoryBytes int64         `json:"memory_bytes"` // per replica
	Concurrency int           `json:"concurrency"`  // container concurrency (Table 2: 10)
	MaxQueue    int           `json:"max_queue"`    // queue proxy queue (Table 2: 100)
	SLO         time.Duration `json:"slo"`
	Autoscaler  string        `json:"autoscaler"` // mu.ASPolicies
	KPATarget   float64       `json:"kpa_target"` // per-pod target for rps/concurrency
	LB          string        `json:"lb"`         // mu.LBPolicies
	Grace       int           `json:"grace"`      // Mu's grace epochs (Table 4: 16)
	// Admission is when requests that would miss the SLO get 503 (§4.1):
	// "slo" whenever the best estimated response exceeds the SLO, "capped"
	// only while the function is capped below N_des, "off" never. Empty:
	// "slo" for the Mu autoscalers, "off" for the Knative baselines.
	Admission   string `json:"admission"`
	MinReplicas int    `json:"min_replicas"`
	// InitialScale is how many replicas the function starts with, before
	// its first request (Knative's initial-scale; 0: from zero, at the
	// first request). Gateway.Prescale starts them.
	InitialScale int `json:"initial_scale"`
	MaxReplicas  int `json:"max_replicas"` // 0: the app budget decides
	// Command is the function server's command line after the queue
	// proxy's "--"; {port} is replaced by its port.
	Command []string `json:"command"`
}

// Validate says what is wrong with a function's configuration.
func (f *Function) Validate() error {
	switch {
	case f.Name == "" || strings.ContainsAny(f.Name, "/ "):
		return fmt.Errorf("function name %q: want a non-empty name without / or spaces", f.Name)
	case f.CPUCores <= 0 || f.MemoryBytes <= 0:
		return fmt.Errorf("function %s: cpu_cores and memory_bytes must be positive", f.Name)
	case f.Concurrency < 1:
		return fmt.Errorf("function %s: concurrency must be ≥ 1", f.Name)
	case f.SLO <= 0:
		return fmt.Errorf("function %s: slo must be positive", f.Name)
	case !slices.Contains(mu.ASPolicies, f.Autoscaler):
		return fmt.Errorf("function %s: autoscaler %q (want one of %v)", f.Name, f.Autoscaler, mu.ASPolicies)
	case !slices.Contains(mu.LBPolicies, f.LB):
		return fmt.Errorf("function %s: lb %q (want one of %v)", f.Name, f.LB, mu.LBPolicies)
	case (f.Autoscaler == mu.ASRPS || f.Autoscaler == mu.ASConcurrency) && f.KPATarget <= 0:
		return fmt.Errorf("function %s: kpa_target must be positive for %s", f.Name, f.Autoscaler)
	case f.InitialScale < 0 || f.MaxReplicas > 0 && f.InitialScale > f.MaxReplicas:
		return fmt.Errorf("function %s: initial_scale %d (want 0..max_replicas)", f.Name, f.InitialScale)
	case f.Admission != "" && !slices.Contains(AdmissionModes, f.Admission):
		return fmt.Errorf("function %s: admission %q (want one of %v)", f.Name, f.Admission, AdmissionModes)
	}
	return nil
}

// Admission modes (Function.Admission).
const (
	AdmitSLO    = "slo"
	AdmitCapped = "capped"
	AdmitOff    = "off"
)

// AdmissionModes lists the values Function.Admission takes.
var AdmissionModes = []string{AdmitSLO, AdmitCapped, AdmitOff}

// AdmissionMode is the function's admission with the default applied.
func (f *Function) AdmissionMode() string {
	switch {
	case f.Admission != "":
		return f.Admission
	case f.Autoscaler == mu.ASMu || f.Autoscaler == mu.ASMuNoPred:
		return AdmitSLO
	}
	return AdmitOff
}

// Replica is one running replica: its queue proxy's address.
type Replica struct {
	ID   string // container name
	Addr string // host:port of the queue proxy
}

// Scaler creates and removes replicas (ControllerScaler: through the Escra
// controller's deployer and escrad).
type Scaler interface {
	// Ceiling is the most replicas the function's app budget allows.
	Ceiling(ctx context.Context, f *Function) (int, error)
	// Nodes is the cluster as placement sees it, for DRF across functions.
	Nodes(ctx context.Context) ([]*placement.Node, error)
	// Add creates one replica on host, the node Mu's placement chose for
	// it; "" leaves the choice to the controller's deployer.
	Add(ctx context.Context, f *Function, host string) (Replica, error)
	Remove(ctx context.Context, f *Function, id string) error
}

// fn is one function's live state.
type fn struct {
	spec  Function
	pool  *mu.Pool
	as    mu.Autoscaler
	proxy *httputil.ReverseProxy

	mu       sync.Mutex
	arrivals float64
	inflight int       // requests inside the gateway (held, queued or running)
	area     float64   // ∫ inflight dt over the epoch
	lastT    time.Time // last change of inflight
	held     int       // requests waiting for a first replica
	ready    map[string]Replica
	pending  int
	removing int
	desired  int
	ceiling  int
	capped   bool
	predRate float64
	nIR, nQ  int // Mu's last Eq 1 and Eq 2 terms
	etEWMA   float64
	wake     chan struct{} // closed when a replica becomes ready
	slot     chan struct{} // closed when a replica answers or becomes ready
	// counters
	served, rejected, failed uint64
	lastObs                  mu.Observation
}

// Gateway routes requests and scales functions.
type Gateway struct {
	scaler Scaler
	log    *slog.Logger
	fns    map[string]*fn
	order  []string
	tr     http.RoundTripper
	now    func() time.Time
	// HoldTimeout bounds how long a request waits for a first replica
	// (scale from zero).
	HoldTimeout time.Duration
	// ReadyTimeout bounds how long a new replica may take to answer.
	ReadyTimeout time.Duration
	// AdoptTimeout bounds how long Adopt waits for a leftover replica's
	// health check.
	AdoptTimeout time.Duration
	epoch        time.Duration
	wg           sync.WaitGroup
	// nodeSelect is the node heuristic of Algorithm 3 that places each
	// granted replica ("alignment", seed 003's default, "worstfit",
	// "bestfit" or "default"); nil: the controller's deployer places them.
	nodeSelect *placement.Profile

	// Eq 7 on the real allocation, CPU: each epoch, replicas ready ×
	// their cores (R_f) against the max-min split of the cluster's cores
	// over what the autoscalers asked (d_f); summed to average over time.
	fairMu            sync.Mutex
	uNow, iNow        float64
	uSum, iSum, fairN float64
}

// DefaultNodeSelect is seed 003's node selection (§3.5.2: Alignment with
// DRF ordering was its best in Fig. 7).
const DefaultNodeSelect = "alignment"

// NodeSelectController is the -node-select value that leaves each
// replica's host to the controller's deployer (app spread, image layers,
// least loaded: docs/depsched.md) and keeps DRF only for the counts.
const NodeSelectController = "controller"

// defaultNodeProfile is DefaultNodeSelect's profile (a known name: no error).
func defaultNodeProfile() *placement.Profile {
	p, _ := placement.MuProfile(DefaultNodeSelect)
	return p
}

// SetNodeSelect chooses where granted replicas go: one of Mu's node
// heuristics ("alignment", "worstfit", "bestfit"), the Kubernetes default
// scores ("default"), or "controller" for the controller's deployer.
// Call it before Run.
func (g *Gateway) SetNodeSelect(alg string) error {
	if alg == NodeSelectController {
		g.nodeSelect = nil
		return nil
	}
	p, err := placement.MuProfile(alg)
	if err != nil {
		return fmt.Errorf("node selection: %w (or %s)", err, NodeSelectController)
	}
	g.nodeSelect = p
	return nil
}

// New returns a gateway for the functions.
func New(fs []Function, s Scaler, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Gateway{scaler: s, log: log, fns: map[string]*fn{}, now: time.Now,
		HoldTimeout: 60 * time.Second, ReadyTimeout: 60 * time.Second, AdoptTimeout: 3 * time.Second, epoch: mu.Epoch, nodeSelect: defaultNodeProfile(),
		tr: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}}
	for i := range fs {
		f := fs[i]
		if err := f.Validate(); err != nil {
			return nil, err
		}
		if g.fns[f.Name] != nil {
			return nil, fmt.Errorf("function %s defined twice", f.Name)
		}
		pool, err := mu.NewPool(f.LB, int64(i+1))
		if err != nil {
			return nil, err
		}
		pool.Concurrency = f.Concurrency
		as, err := mu.NewAutoscaler(f.Autoscaler, mu.MuConfig{SLO: f.SLO, Grace: f.Grace, Concurrency: f.Concurrency}, f.KPATarget)
		if err != nil {
			return nil, err
		}
		st := &fn{spec: f, pool: pool, as: as, ready: map[string]Replica{}, wake: make(chan struct{}), slot: make(chan struct{}), lastT: g.now(), ceiling: math.MaxInt32}
		st.proxy = g.reverseProxy(st)
		g.fns[f.Name] = st
		g.order = append(g.order, f.Name)
	}
	return g, nil
}

type pickKey struct{}

func (g *Gateway) reverseProxy(st *fn) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport: g.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			b := pr.In.Context().Value(pickKey{}).(*mu.Backend)
			pr.SetURL(&url.URL{Scheme: "http", Host: b.Addr})
			pr.Out.URL.Path, pr.Out.URL.RawPath = pr.In.URL.Path, pr.In.URL.RawPath
		},
		ModifyResponse: func(resp *http.Response) error {
			b := resp.Request.Context().Value(pickKey{}).(*mu.Backend)
			m := parseMetrics(resp.Header)
			for _, h := range []string{mu.HeaderQueue, mu.HeaderExecMs, mu.HeaderDeparture, mu.HeaderConfidence} {
				resp.Header.Del(h)
			}
			st.pool.Done(b, m)
			st.freed()
			if m != nil && m.ExecSec > 0 {
				st.mu.Lock()
				if st.etEWMA == 0 {
					st.etEWMA = m.ExecSec
				} else {
					st.etEWMA = 0.9*st.etEWMA + 0.1*m.ExecSec
				}
				st.mu.Unlock()
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st.pool.Done(r.Context().Value(pickKey{}).(*mu.Backend), nil)
			st.freed()
			st.mu.Lock()
			st.failed++
			st.mu.Unlock()
			http.Error(w, "gateway: replica: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// parseMetrics reads the piggybacked headers; nil when absent or bad.
func parseMetrics(h http.Header) *mu.PodMetrics {
	q, err1 := strconv.Atoi(h.Get(mu.HeaderQueue))
	et, err2 := strconv.ParseFloat(h.Get(mu.HeaderExecMs), 64)
	r, err3 := strconv.ParseFloat(h.Get(mu.HeaderDeparture), 64)
	c, err4 := strconv.ParseFloat(h.Get(mu.HeaderConfidence), 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return nil
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	if q < 0 || bad(et) || bad(r) || bad(c) || c > 1 {
		return nil
	}
	return &mu.PodMetrics{Queue: q, ExecSec: et / 1000, Departure: r, Confidence: c}
}

// route finds the function of a request: /fn/NAME/... (the prefix is
// stripped) or a Host whose first label is NAME.
func (g *Gateway) route(r *http.Request) (*fn, string) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/fn/"); ok {
		name, path, _ := strings.Cut(rest, "/")
		if st := g.fns[name]; st != nil {
			return st, "/" + path
		}
		return nil, ""
	}
	host, _, _ := strings.Cut(r.Host, ":")
	name, _, _ := strings.Cut(host, ".")
	if st := g.fns[name]; st != nil {
		return st, r.URL.Path
	}
	return nil, ""
}

func (st *fn) track(now time.Time, d int) {
	st.area += float64(st.inflight) * now.Sub(st.lastT).Seconds()
	st.lastT = now
	st.inflight += d
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, path := g.route(r)
	if st == nil {
		http.Error(w, "gateway: no function for this host or path (use /fn/NAME/...)", http.StatusNotFound)
		return
	}
	arrived := g.now()
	st.mu.Lock()
	st.arrivals++
	st.track(arrived, +1)
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.track(g.now(), -1)
		st.mu.Unlock()
	}()
	if st.pool.Len() == 0 {
		// Scale from zero: hold the request at the gateway until a
		// replica is ready.
		st.mu.Lock()
		st.held++
		wake := st.wake
		st.mu.Unlock()
		g.kick(st)
		t := time.NewTimer(g.HoldTimeout)
		select {
		case <-wake:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		st.mu.Lock()
		st.held--
		st.mu.Unlock()
	}
	b := g.activate(st, r, arrived)
	if b == nil && g.reject(st, g.now().Sub(arrived)) {
		st.mu.Lock()
		st.rejected++
		st.mu.Unlock()
		http.Error(w, "gateway: over capacity, request would miss the SLO", http.StatusServiceUnavailable)
		return
	}
	if b == nil {
		b = st.pool.Pick()
	}
	if b == nil {
		st.mu.Lock()
		st.rejected++
		st.mu.Unlock()
		http.Error(w, "gateway: no replica ready", http.StatusServiceUnavailable)
		return
	}
	r2 := r.WithContext(context.WithValue(r.Context(), pickKey{}, b))
	r2.URL.Path, r2.URL.RawPath = path, ""
	rec := &statusWriter{ResponseWriter: w}
	st.proxy.ServeHTTP(rec, r2)
	if rec.code < 500 {
		st.mu.Lock()
		st.served++
		st.mu.Unlock()
	}
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(c int) {
	if s.code == 0 {
		s.code = c
	}
	s.ResponseWriter.WriteHeader(c)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = 200
	}
	return s.ResponseWriter.Write(b)
}

// reject is Mu's admission (§4.1): a request whose best estimated
// response time, min_i (Q_i+1)/Cap_i (Eq 5), already exceeds the SLO is
// refused rather than queued behind requests that will miss it too. The
// paper's 503s come "when resources are not yet provisioned" during
// bursts, not only at the budget, so by default it applies whenever the
// queues are that long; "capped" keeps it to a function capped below N_des.
func (g *Gateway) reject(st *fn, waited time.Duration) bool {
	st.mu.Lock()
	capped := st.capped
	st.mu.Unlock()
	best, ok := st.pool.BestResponse()
	return Refuses(st.spec.AdmissionMode(), capped, best, ok, st.spec.SLO-waited)
}

// Refuses is the admission rule itself, shared with the benchmark's
// replay: under mode (capped: whether the budget holds the function below
// N_des), a request is refused when the best estimated response, best s
// (ok: an estimate exists), exceeds what is left of its SLO.
func Refuses(mode string, capped bool, best float64, ok bool, left time.Duration) bool {
	switch mode {
	case AdmitOff:
		return false
	case AdmitCapped:
		if !capped {
			return false
		}
	}
	return ok && best > left.Seconds()
}

// activate is the gateway's cold path, as Knative's activator: until a
// replica of the function has answered once, nothing is known of its
// speed, so a request goes only to a replica with a free concurrency slot
// and otherwise waits here (for a slot, a new replica or a first answer),
// rather than joining one replica's queue while later replicas stand
// idle. It returns the replica it sent the request to, or nil once the
// function's speed is known (the caller then applies admission and the
// load balancer) or the hold timed out.
func (g *Gateway) activate(st *fn, r *http.Request, arrived time.Time) *mu.Backend {
	if st.spec.Concurrency < 1 {
		return nil
	}
	var t *time.Timer
	for !st.pool.Known() {
		st.mu.Lock()
		slot := st.slot
		st.mu.Unlock()
		if b := st.pool.PickFree(); b != nil {
			return b
		}
		if t == nil {
			t = time.NewTimer(max(g.HoldTimeout-g.now().Sub(arrived), 0))
			defer t.Stop()
		}
		select {
		case <-slot:
		case <-t.C:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
	return nil
}

// freed wakes requests waiting in activate.
func (st *fn) freed() {
	st.mu.Lock()
	close(st.slot)
	st.slot = make(chan struct{})
	st.mu.Unlock()
}

// kick starts a scale-up to at least one replica at once (first request).
func (g *Gateway) kick(st *fn) {
	st.mu.Lock()
	need := len(st.ready)+st.pending == 0
	if need {
		st.pending++
		st.desired = max(st.desired, 1)
	}
	st.mu.Unlock()
	if need {
		g.wg.Add(1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			host := g.firstHost(ctx, st)
			cancel()
			g.addOne(st, host)
		}()
	}
}

// firstHost is where a function's first replica goes, chosen outside the
// epoch for a held request: the node selection's pick for one pod (no DRF:
// nothing to share yet), or "" for the controller's deployer when no node
// selection is set or the cluster view is unavailable.
func (g *Gateway) firstHost(ctx context.Context, st *fn) string {
	if g.nodeSelect == nil {
		return ""
	}
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return ""
	}
	placed := placement.PlaceDRF(g.nodeSelect, []*placement.Demand{{App: st.spec.Name, Image: st.spec.Image,
		CPU: st.spec.CPUCores, Memory: st.spec.MemoryBytes, Pods: 1}}, nodes)
	if len(placed) == 0 {
		return ""
	}
	return placed[0].Node.Name
}

func (g *Gateway) addOne(st *fn, host string) {
	defer g.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), g.ReadyTimeout+60*time.Second)
	defer cancel()
	rep, err := g.scaler.Add(ctx, &st.spec, host)
	if err != nil && host != "" && ctx.Err() == nil {
		// The controller's view moved since the epoch's snapshot (the
		// host filled up or left): a replica elsewhere beats none.
		g.log.Warn("gateway: chosen host refused the replica, letting the controller place it", "function", st.spec.Name, "host", host, "err", err)
		host = ""
		rep, err = g.scaler.Add(ctx, &st.spec, host)
	}
	if err == nil {
		err = waitReady(ctx, g.tr, rep.Addr, g.ReadyTimeout)
		if err != nil {
			g.scaler.Remove(context.Background(), &st.spec, rep.ID)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.pending--
	if err != nil {
		g.log.Warn("gateway: replica not added", "function", st.spec.Name, "host", host, "err", err)
		return
	}
	st.join(rep)
	g.log.Info("gateway: replica ready", "function", st.spec.Name, "replica", rep.ID, "addr", rep.Addr)
}

// join puts a ready replica in the pool and wakes the requests waiting
// for one (scale from zero, activate). The caller holds st.mu.
func (st *fn) join(rep Replica) {
	st.ready[rep.ID] = rep
	st.pool.Add(rep.ID, rep.Addr)
	close(st.wake)
	st.wake = make(chan struct{})
	close(st.slot)
	st.slot = make(chan struct{})
}

func waitReady(ctx context.Context, tr http.RoundTripper, addr string, d time.Duration) error {
	c := &http.Client{Transport: tr, Timeout: time.Second}
	deadline := time.Now().Add(d)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/mu/healthz", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replica at %s did not answer within %s", addr, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *Gateway) removeOne(st *fn, id string) {
	defer g.wg.Done()
	// Already out of the pool: let requests sent to it finish first
	// (bounded by the SLO), then remove the container.
	time.Sleep(min(st.spec.SLO, 2*time.Second))
	err := g.scaler.Remove(context.Background(), &st.spec, id)
	st.mu.Lock()
	st.removing--
	st.mu.Unlock()
	if err != nil {
		g.log.Warn("gateway: replica not removed", "function", st.spec.Name, "replica", id, "err", err)
	}
}

// Adopt takes over the replicas a previous gateway left running, when the
// scaler can list them (Adopter): each that answers its health check
// within AdoptTimeout joins the pool at once, the others are removed.
// Call it before serving, so that no new replica takes a leftover's port.
// The autoscaler then sizes the function from its load as usual.
func (g *Gateway) Adopt(ctx context.Context) error {
	ad, ok := g.scaler.(Adopter)
	if !ok {
		return nil
	}
	var errs []error
	var wg sync.WaitGroup
	for _, name := range g.order {
		st := g.fns[name]
		reps, err := ad.Existing(ctx, &st.spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("function %s: listing its replicas: %w", name, err))
			continue
		}
		for _, rep := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rep.Addr != "" && waitReady(ctx, g.tr, rep.Addr, g.AdoptTimeout) == nil {
					st.mu.Lock()
					st.join(rep)
					st.mu.Unlock()
					g.log.Info("gateway: adopted a running replica", "function", name, "replica", rep.ID, "addr", rep.Addr)
					return
				}
				g.log.Warn("gateway: removing a replica left by an earlier gateway that does not answer", "function", name, "replica", rep.ID)
				if err := g.scaler.Remove(ctx, &st.spec, rep.ID); err != nil {
					g.log.Warn("gateway: leftover replica not removed", "function", name, "replica", rep.ID, "err", err)
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Prescale starts each function's InitialScale replicas, where the
// budget and the node selection allow, and waits until they are ready or
// ctx ends: the function meets its first requests warm. Replicas already
// there (adopted) count. Call it before Run.
func (g *Gateway) Prescale(ctx context.Context) error {
	want := map[string]int{}
	short := false
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		cur := len(st.ready) + st.pending
		want[name] = max(st.spec.InitialScale, cur)
		short = short || st.spec.InitialScale > cur
		st.mu.Unlock()
	}
	if !short {
		return nil // nothing to start: no round trip to the controller
	}
	granted, hosts := g.grant(ctx, want)
	target := map[string]int{}
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		add := granted[name] - (len(st.ready) + st.pending)
		if add > 0 {
			st.pending += add
			st.desired = max(st.desired, granted[name])
		}
		target[name] = len(st.ready) + st.pending
		st.mu.Unlock()
		for i := range max(add, 0) {
			host := ""
			if i < len(hosts[name]) {
				host = hosts[name][i]
			}
			g.wg.Add(1)
			go g.addOne(st, host)
		}
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var errs []error
		waiting := false
		for _, name := range g.order {
			st := g.fns[name]
			st.mu.Lock()
			ready, pending := len(st.ready), st.pending
			st.mu.Unlock()
			switch {
			case ready >= target[name]:
			case pending > 0:
				waiting = true
			default:
				errs = append(errs, fmt.Errorf("function %s: %d of %d initial replicas ready", name, ready, st.spec.InitialScale))
			}
		}
		if !waiting {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("initial scale: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Run scales every epoch until ctx ends, then waits for scale operations
// in progress.
func (g *Gateway) Run(ctx context.Context) {
	t := time.NewTicker(g.epoch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.wg.Wait()
			return
		case <-t.C:
			g.Tick(ctx)
		}
	}
}

// Tick is one autoscaling epoch over every function.
func (g *Gateway) Tick(ctx context.Context) {
	now := g.now()
	want := map[string]int{}
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		st.track(now, 0)
		el := g.epoch.Seconds()
		o := mu.Observation{
			Ready:       len(st.ready) + st.pending,
			Arrivals:    st.arrivals,
			EpochSec:    el,
			Concurrency: st.area / el,
			Queued:      float64(st.pool.Queued() + st.held),
			CapE:        st.pool.Capacity(),
			ExecSec:     st.etEWMA,
		}
		st.arrivals, st.area = 0, 0
		st.lastObs = o
		st.mu.Unlock()
		d := st.as.Desired(o)
		if m, ok := st.as.(*mu.MuAutoscaler); ok {
			st.mu.Lock()
			st.predRate = m.Predicted()
			st.nIR, st.nQ = m.Terms()
			st.mu.Unlock()
		}
		if st.spec.MaxReplicas > 0 {
			d = min(d, st.spec.MaxReplicas)
		}
		d = max(d, st.spec.MinReplicas)
		want[name] = d
	}
	granted, hosts := g.grant(ctx, want)
	for _, name := range g.order {
		st := g.fns[name]
		g.reconcile(st, want[name], granted[name], hosts[name])
	}
	g.fairness(ctx, want)
}

// fairness computes Eq 7 (seed 003 §3.5.1) for CPU over the functions
// that want replicas, against the cluster's cores.
func (g *Gateway) fairness(ctx context.Context, want map[string]int) {
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return
	}
	var capCPU float64
	for _, n := range nodes {
		capCPU += n.CPUCap
	}
	var demand, alloc []float64
	for _, name := range g.order {
		st := g.fns[name]
		if want[name] == 0 {
			continue
		}
		st.mu.Lock()
		ready := len(st.ready)
		st.mu.Unlock()
		demand = append(demand, float64(want[name])*st.spec.CPUCores)
		alloc = append(alloc, float64(ready)*st.spec.CPUCores)
	}
	if len(demand) == 0 {
		return
	}
	u, i := mu.Eq7(capCPU, demand, alloc)
	g.fairMu.Lock()
	g.uNow, g.iNow = u, i
	g.uSum += u
	g.iSum += i
	g.fairN++
	g.fairMu.Unlock()
}

// Fairness returns Eq 7's unfairness and inefficiency (CPU cores per
// function) of the last epoch and averaged over the epochs so far.
func (g *Gateway) Fairness() (uNow, iNow, uAvg, iAvg float64) {
	g.fairMu.Lock()
	defer g.fairMu.Unlock()
	if g.fairN > 0 {
		uAvg, iAvg = g.uSum/g.fairN, g.iSum/g.fairN
	}
	return g.uNow, g.iNow, uAvg, iAvg
}

// ResetFairness starts Eq 7's averages afresh, so that a benchmark's
// unmeasured warm-up does not count in them (Eq 7 sums over the measured
// instants T).
func (g *Gateway) ResetFairness() {
	g.fairMu.Lock()
	g.uSum, g.iSum, g.fairN = 0, 0, 0
	g.fairMu.Unlock()
}

// grant caps each function by its app budget and, when the cluster cannot
// hold every function's growth, shares the room by DRF (Algorithm 3). The
// hosts are the nodes Algorithm 3's node selection chose for each granted
// new replica, in order (none when the controller's deployer places).
func (g *Gateway) grant(ctx context.Context, want map[string]int) (map[string]int, map[string][]string) {
	out := map[string]int{}
	var ds []*placement.Demand
	for _, name := range g.order {
		st := g.fns[name]
		c, err := g.scaler.Ceiling(ctx, &st.spec)
		if err != nil {
			g.log.Warn("gateway: budget unknown", "function", name, "err", err)
			st.mu.Lock()
			c = len(st.ready) + st.pending
			st.mu.Unlock()
		}
		st.mu.Lock()
		st.ceiling = c
		cur := len(st.ready) + st.pending
		st.mu.Unlock()
		out[name] = min(want[name], c)
		if extra := out[name] - cur; extra > 0 {
			ds = append(ds, &placement.Demand{App: name, CPU: st.spec.CPUCores, Memory: st.spec.MemoryBytes,
				Pods: extra, AllocCPU: float64(cur) * st.spec.CPUCores, AllocMem: int64(cur) * st.spec.MemoryBytes})
		}
	}
	if len(ds) == 0 {
		return out, nil
	}
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return out, nil
	}
	// Which function gets the room is DRF's either way; where each
	// replica goes is the node heuristic's only if one is set.
	prof := g.nodeSelect
	if prof == nil {
		prof = defaultNodeProfile()
	}
	placed := placement.PlaceDRF(prof, ds, nodes)
	var hosts map[string][]string
	if g.nodeSelect != nil {
		hosts = map[string][]string{}
		for _, p := range placed {
			hosts[p.App] = append(hosts[p.App], p.Node.Name)
		}
	}
	for _, d := range ds {
		st := g.fns[d.App]
		st.mu.Lock()
		cur := len(st.ready) + st.pending
		st.mu.Unlock()
		out[d.App] = cur + d.Placed
	}
	return out, hosts
}

func (g *Gateway) reconcile(st *fn, want, granted int, hosts []string) {
	st.mu.Lock()
	cur := len(st.ready) + st.pending
	st.desired = want
	st.capped = granted < want
	add := granted - cur
	var drop []string
	if granted < cur && st.pending == 0 {
		// Remove the slowest replicas first (§3.4.1).
		// cur already leaves out replicas being removed.
		for k := cur - granted; k > 0; k-- {
			id := st.pool.Slowest()
			if id == "" || len(st.ready) == 0 {
				break
			}
			delete(st.ready, id)
			st.pool.Remove(id)
			drop = append(drop, id)
		}
	}
	st.pending += max(add, 0)
	st.removing += len(drop)
	st.mu.Unlock()
	for i := range max(add, 0) {
		host := ""
		if i < len(hosts) {
			host = hosts[i]
		}
		g.wg.Add(1)
		go g.addOne(st, host)
	}
	for _, id := range drop {
		g.wg.Add(1)
		go g.removeOne(st, id)
	}
}

// Status is one function's state for /v1/functions and `escractl top`.
type Status struct {
	Name          string            `json:"name"`
	Autoscaler    string            `json:"autoscaler"`
	LB            string            `json:"lb"`
	Ready         int               `json:"ready"`
	Pending       int               `json:"pending"`
	Desired       int               `json:"desired"`
	Ceiling       int               `json:"ceiling"`
	Capped        bool              `json:"capped"`
	Inflight      int               `json:"inflight"`
	Queued        int               `json:"queued"`
	CapacityRPS   float64           `json:"capacity_rps"`
	RateRPS       float64           `json:"rate_rps"`
	PredictedRPS  float64           `json:"predicted_rps"`
	ExecMs        float64           `json:"exec_ms"`
	Served        uint64            `json:"served"`
	Rejected      uint64            `json:"rejected"`
	Failed        uint64            `json:"failed"`
	Replicas      []mu.BackendStats `json:"replicas"`
	ObservedEpoch mu.Observation    `json:"observed_epoch"`
	NIR           int               `json:"n_ir,omitempty"`    // Mu: last Eq 1 term
	NQueue        int               `json:"n_queue,omitempty"` // Mu: last Eq 2 term
}

// Statuses returns every function's state.
func (g *Gateway) Statuses() []Status {
	var out []Status
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		s := Status{Name: name, Autoscaler: st.spec.Autoscaler, LB: st.spec.LB, Ready: len(st.ready), Pending: st.pending,
			Desired: st.desired, Ceiling: st.ceiling, Capped: st.capped, Inflight: st.inflight, PredictedRPS: st.predRate,
			ExecMs: st.etEWMA * 1000, Served: st.served, Rejected: st.rejected, Failed: st.failed, ObservedEpoch: st.lastObs,
			RateRPS: st.lastObs.Rate(), NIR: st.nIR, NQueue: st.nQ}
		st.mu.Unlock()
		s.Queued = st.pool.Queued()
		s.CapacityRPS = st.pool.Capacity()
		s.Replicas = st.pool.Stats()
		out = append(out, s)
	}
	return out
}

// Shutdown removes every replica the gateway made.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.wg.Wait()
	var errs []error
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		ids := make([]string, 0, len(st.ready))
		for id := range st.ready {
			ids = append(ids, id)
		}
		st.ready = map[string]Replica{}
		st.mu.Unlock()
		for _, id := range ids {
			st.pool.Remove(id)
			if err := g.scaler.Remove(ctx, &st.spec, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
