// Package queueproxy is Mu's queue proxy (Mu §3.1): it sits in front
// of one function replica, lets at most Concurrency requests into the user
// server at a time, queues up to MaxQueue more (503 beyond), runs
// Algorithm 1 on the traffic and piggybacks its metrics on every response
// in the mu.Header* headers.
package queueproxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// Proxy is one replica's queue proxy.
type Proxy struct {
	est      *mu.Estimator
	slots    chan struct{}
	max      int
	rp       *httputil.ReverseProxy
	upstream string // host:port
	now      func() time.Time
}

type ctxKey struct{}

type reqState struct {
	tk    *mu.Ticket
	q     int
	start time.Time
}

// New returns a proxy to the user server at upstream (http://host:port).
// concurrency ≥ 1; maxQueue ≥ 0 (Table 2: 10 and 100).
func New(upstream string, concurrency, maxQueue int) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("queue proxy: bad upstream %q (want http://host:port)", upstream)
	}
	if concurrency < 1 || maxQueue < 0 {
		return nil, fmt.Errorf("queue proxy: concurrency must be ≥ 1 and max queue ≥ 0 (got %d, %d)", concurrency, maxQueue)
	}
	p := &Proxy{est: mu.NewEstimator(mu.EstimatorConfig{}, time.Now()), slots: make(chan struct{}, concurrency), max: maxQueue, now: time.Now, upstream: u.Host}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			p.finish(resp.Request.Context(), resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.finish(r.Context(), w.Header())
			http.Error(w, "queue proxy: user container: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

// finish runs Algorithm 1's response step once per request and writes the
// piggybacked headers.
func (p *Proxy) finish(ctx context.Context, h http.Header) {
	st, _ := ctx.Value(ctxKey{}).(*reqState)
	if st == nil || st.tk == nil {
		return
	}
	m := p.est.Respond(st.tk, p.now().Sub(st.start), st.q)
	st.tk = nil
	h.Set(mu.HeaderQueue, strconv.Itoa(m.Queue))
	h.Set(mu.HeaderExecMs, strconv.FormatFloat(m.ExecSec*1000, 'f', 3, 64))
	h.Set(mu.HeaderDeparture, strconv.FormatFloat(m.Departure, 'f', 3, 64))
	h.Set(mu.HeaderConfidence, strconv.FormatFloat(m.Confidence, 'f', 3, 64))
}

// Run advances the estimator's intervals until ctx ends.
func (p *Proxy) Run(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.est.Advance(now)
		}
	}
}

// Snapshot returns the current metrics.
func (p *Proxy) Snapshot() mu.PodMetrics { m, _ := p.est.Snapshot(); return m }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/mu/healthz" {
		// Ready when the function itself accepts connections (it may
		// start after the proxy).
		c, err := net.DialTimeout("tcp", p.upstream, 500*time.Millisecond)
		if err != nil {
			http.Error(w, "function not listening yet: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		c.Close()
		fmt.Fprintln(w, "ok")
		return
	}
	if m, _ := p.est.Snapshot(); m.Queue >= p.max {
		w.Header().Set(mu.HeaderQueue, strconv.Itoa(m.Queue))
		http.Error(w, "queue proxy: queue full", http.StatusServiceUnavailable)
		return
	}
	tk := p.est.Arrive()
	select {
	case p.slots <- struct{}{}:
	case <-r.Context().Done():
		p.est.Abandon(tk)
		return
	}
	defer func() { <-p.slots }()
	st := &reqState{tk: tk, start: p.now()}
	st.q = p.est.Dequeue(tk)
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, st)))
	if st.tk != nil { // neither hook ran (client went away early)
		p.est.Respond(st.tk, p.now().Sub(st.start), st.q)
	}
	p.est.Advance(p.now())
}
