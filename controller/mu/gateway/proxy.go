package gateway

import (
	"context"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

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
