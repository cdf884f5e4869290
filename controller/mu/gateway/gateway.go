// Package gateway is escra-gateway's core: Mu's ingress (Mu §3):
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
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

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
	// granted replica ("alignment", Mu's default, "worstfit",
	// "bestfit" or "default"); nil: the controller's deployer places them.
	nodeSelect *placement.Profile

	// Eq 7 on the real allocation, CPU: each epoch, replicas ready ×
	// their cores (R_f) against the max-min split of the cluster's cores
	// over what the autoscalers asked (d_f); summed to average over time.
	fairMu            sync.Mutex
	uNow, iNow        float64
	uSum, iSum, fairN float64
}

// DefaultNodeSelect is Mu's node selection (Mu §3.5.2: Alignment with
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
