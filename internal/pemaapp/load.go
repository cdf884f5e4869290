package pemaapp

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Sample is one request as the client saw it.
type Sample struct {
	At      time.Duration // since the start of the run
	Latency time.Duration
	OK      bool
}

// Client is an open-loop Poisson load generator: arrivals follow rate(t)
// whatever the responses do (a slow app gets more requests in flight, not
// fewer), so queueing shows in the latency.
type Client struct {
	URL      string
	Rate     func(t time.Duration) float64 // requests per second at t
	Seed     uint64
	Timeout  time.Duration
	MaxInFly int // requests beyond this fail at once (counted, latency = Timeout)

	mu      sync.Mutex
	samples []Sample
	open    map[uint64]time.Duration // requests in flight: id → arrival
	nextID  uint64
	start   time.Time
}

// Run sends requests until ctx ends.
func (c *Client) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	tr := &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}
	to := c.Timeout
	if to == 0 {
		to = 5 * time.Second
	}
	hc := &http.Client{Transport: tr, Timeout: to}
	maxIn := c.MaxInFly
	if maxIn == 0 {
		maxIn = 2000
	}
	sem := make(chan struct{}, maxIn)
	var wg sync.WaitGroup
	start := time.Now()
	next := time.Duration(0)
	for {
		rate := c.Rate(next)
		if rate <= 0 {
			rate = 0.1
		}
		next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if d := time.Until(start.Add(next)); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			wg.Wait()
			return
		}
		at := next
		select {
		case sem <- struct{}{}:
		default:
			c.add(Sample{At: at, Latency: to})
			continue
		}
		wg.Add(1)
		c.mu.Lock()
		if c.open == nil {
			c.open = map[uint64]time.Duration{}
		}
		c.start = start
		c.nextID++
		id := c.nextID
		c.open[id] = at
		c.mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() { c.mu.Lock(); delete(c.open, id); c.mu.Unlock() }()
			t0 := time.Now()
			resp, err := hc.Get(c.URL)
			ok := err == nil
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == 200
			}
			lat := time.Since(t0)
			if !ok {
				lat = max(lat, to)
			}
			c.add(Sample{At: at, Latency: lat, OK: ok})
		}()
	}
}

func (c *Client) add(s Sample) {
	c.mu.Lock()
	c.samples = append(c.samples, s)
	c.mu.Unlock()
}

// Samples returns the samples so far.
func (c *Client) Samples() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Sample(nil), c.samples...)
}

// SamplesNow is Samples plus the requests still in flight, each with the
// latency it has so far: a window read while requests queue must count
// them (OPTM's trials read windows while the client runs).
func (c *Client) SamplesNow() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]Sample(nil), c.samples...)
	now := time.Since(c.start)
	for _, at := range c.open {
		out = append(out, Sample{At: at, Latency: max(0, now-at)})
	}
	return out
}

// Window is the client's view of one interval.
type Window struct {
	Start    time.Duration
	Requests int
	Failed   int
	P95      time.Duration
	RPS      float64
}

// Windows cuts the samples into intervals of d by arrival time.
func Windows(ss []Sample, d time.Duration, until time.Duration) []Window {
	n := int(until / d)
	lat := make([][]time.Duration, n)
	out := make([]Window, n)
	for _, s := range ss {
		i := int(s.At / d)
		if i < 0 || i >= n {
			continue
		}
		lat[i] = append(lat[i], s.Latency)
		out[i].Requests++
		if !s.OK {
			out[i].Failed++
		}
	}
	for i := range out {
		out[i].Start = time.Duration(i) * d
		out[i].RPS = float64(out[i].Requests) / d.Seconds()
		out[i].P95 = P95(lat[i])
	}
	return out
}

// P95 is the nearest-rank 95th percentile.
func P95(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), v...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[int(math.Ceil(0.95*float64(len(s))))-1]
}
