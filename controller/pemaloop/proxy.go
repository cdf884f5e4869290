package pemaloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Proxy is the reverse proxy the pema policy owns in front of the app's
// entry service: the latency it records is what clients see (PEMA
// took it from Linkerd; the Mu gateway would be the place once it exists).
type Proxy struct {
	ln  net.Listener
	srv *http.Server

	mu    sync.Mutex
	lat   []time.Duration
	errs  int
	since time.Time
	// recent: the last requests with their completion times, for a
	// sliding p95 (pema-guarded); kept for keep, 0: not kept.
	keep   time.Duration
	recent []timed
}

type timed struct {
	at time.Time
	d  time.Duration
}

// Window is what the proxy saw since the last Take.
type Window struct {
	N      int           // requests completed
	Errors int           // of which failed upstream (502)
	P95    time.Duration // nearest-rank p95 of all N
	RPS    float64
	Span   time.Duration
}

// maxSamples bounds memory between two Takes (a 30 s interval at 10k rps);
// beyond it every other sample is dropped, which keeps the percentiles.
const maxSamples = 1 << 19

// NewProxy listens on listen (host:port; port 0 picks one) and forwards
// to upstream (host:port or an http:// URL).
func NewProxy(listen, upstream string) (*Proxy, error) {
	u, err := parseUpstream(upstream)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("pema proxy: %w", err)
	}
	p := &Proxy{ln: ln, since: time.Now()}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		p.mu.Lock()
		p.errs++
		p.mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			rp.ServeHTTP(w, r)
			p.record(time.Since(start))
		})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func parseUpstream(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("pema proxy: no upstream")
	}
	raw := s
	if !strings.Contains(s, "://") {
		raw = "http://" + s
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("pema proxy: upstream %q: want host:port or an http URL", s)
	}
	return u, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) record(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keep > 0 {
		now := time.Now()
		i := 0
		for i < len(p.recent) && now.Sub(p.recent[i].at) > p.keep {
			i++
		}
		if i > 0 && i > len(p.recent)/2 {
			p.recent = append(p.recent[:0], p.recent[i:]...)
		} else if len(p.recent) >= maxSamples {
			p.recent = p.recent[1:]
		}
		p.recent = append(p.recent, timed{at: now, d: d})
	}
	if len(p.lat) >= maxSamples {
		p.lat = p.lat[:copy(p.lat, everyOther(p.lat))]
	}
	p.lat = append(p.lat, d)
}

func everyOther(v []time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(v)/2)
	for i := 0; i < len(v); i += 2 {
		out = append(out, v[i])
	}
	return out
}

// Take returns the window since the last Take and starts a new one.
func (p *Proxy) Take() Window {
	p.mu.Lock()
	lat, errs, since := p.lat, p.errs, p.since
	p.lat, p.errs, p.since = make([]time.Duration, 0, len(lat)), 0, time.Now()
	p.mu.Unlock()
	w := Window{N: len(lat), Errors: errs, Span: time.Since(since)}
	if w.Span > 0 {
		w.RPS = float64(w.N) / w.Span.Seconds()
	}
	w.P95 = Percentile(lat, 0.95)
	return w
}

// KeepRecent makes the proxy keep the requests of the last d, for Recent.
func (p *Proxy) KeepRecent(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep = d
}

// Recent is the p95 of the requests completed since since (and within
// the kept span), and how many there were: a sliding p95 (pema-guarded).
func (p *Proxy) Recent(since time.Time) (time.Duration, int) {
	p.mu.Lock()
	since = maxTime(since, time.Now().Add(-p.keep))
	var lat []time.Duration
	for j := len(p.recent) - 1; j >= 0 && !p.recent[j].at.Before(since); j-- {
		lat = append(lat, p.recent[j].d)
	}
	p.mu.Unlock()
	return Percentile(lat, 0.95), len(lat)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Percentile is the nearest-rank q-quantile (0 for no samples).
func Percentile(v []time.Duration, q float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}
