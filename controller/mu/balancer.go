package mu

import (
	"fmt"
	"math"
	"math/rand"
	"sync"
)

// Load-balancing policies of the gateway: Mu's (§3.4.1) and the baselines
// Knative and Envoy users get.
const (
	LBMu        = "mu"
	LBRoundRob  = "rr"
	LBLeastConn = "leastconn"
	LBP2C       = "p2c"
)

// LBPolicies lists the policies a Pool accepts.
var LBPolicies = []string{LBMu, LBRoundRob, LBLeastConn, LBP2C}

// minRatio bounds Cap = R/Ratio (§3.4.1) when the confidence ratio is near
// zero: a pod that never queued is assumed to serve at most 1/minRatio
// times its departure rate, instead of an infinite capacity.
const minRatio = 0.1

// Backend is one replica as the gateway sees it.
type Backend struct {
	ID   string
	Addr string // host:port of its queue proxy

	inflight int     // requests this gateway has sent and not seen answered
	pigQ     int     // last piggybacked queue length
	cap      float64 // Cap_i, req/s; 0 = unknown
	savedR   float64 // savedR_i
	savedRat float64 // savedRatio_i
	sent     uint64
	lastPig  [2]float64 // the (R, Ratio) pair last seen, to act once per interval
}

// BackendStats is a read-only copy for metrics and `escractl top`.
type BackendStats struct {
	ID, Addr string
	Inflight int
	Queue    int
	Capacity float64
	Sent     uint64
}

// Pool is the replica set of one function and the policy that picks among
// them. It is safe for concurrent use.
type Pool struct {
	policy string
	// Concurrency is the container concurrency of the function's pods:
	// by Little's law a pod serves at most Concurrency/ET_avg req/s, a
	// bound on Cap = R/Ratio when the ratio is small. 0: no bound.
	Concurrency int
	mu          sync.Mutex
	bs          []*Backend
	next        int
	rng         *rand.Rand
	maxCap      float64 // largest Cap seen on any pod of this function
	lastET      float64 // the last piggybacked execution time, s
}

// NewPool returns an empty pool with one of LBPolicies.
func NewPool(policy string, seed int64) (*Pool, error) {
	switch policy {
	case LBMu, LBRoundRob, LBLeastConn, LBP2C:
	default:
		return nil, fmt.Errorf("unknown load balancer %q (want mu, rr, leastconn or p2c)", policy)
	}
	return &Pool{policy: policy, rng: rand.New(rand.NewSource(seed))}, nil
}

// Policy names the pool's policy.
func (p *Pool) Policy() string { return p.policy }

// Add inserts a replica (no-op if its ID is present). A new pod with no
// data starts with the largest capacity seen on the function's other pods
// (§3.4.1); because the Mu policy counts requests in flight immediately,
// it then receives requests only until its estimated response time reaches
// the others', so it ramps up without being herded.
func (p *Pool) Add(id, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.bs {
		if b.ID == id {
			return
		}
	}
	p.bs = append(p.bs, &Backend{ID: id, Addr: addr})
}

// Remove drops a replica; requests in flight to it still finish.
func (p *Pool) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range p.bs {
		if b.ID == id {
			p.bs = append(p.bs[:i], p.bs[i+1:]...)
			return
		}
	}
}

// Len is the number of replicas.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.bs)
}

// Pick chooses a replica for one request and counts it in flight; the
// caller must call Done with the same backend. Nil when the pool is empty.
func (p *Pool) Pick() *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.bs)
	if n == 0 {
		return nil
	}
	var b *Backend
	switch p.policy {
	case LBRoundRob:
		b = p.bs[p.next%n]
		p.next++
	case LBLeastConn:
		// Ties go round-robin, so equal pods share the load.
		start := p.next % n
		p.next++
		for k := range n {
			c := p.bs[(start+k)%n]
			if b == nil || c.inflight < b.inflight {
				b = c
			}
		}
	case LBP2C:
		// Knative's activator: two random pods, the one with fewer
		// requests in flight (§3.4).
		i := p.rng.Intn(n)
		j := i
		if n > 1 {
			j = p.rng.Intn(n - 1)
			if j >= i {
				j++
			}
		}
		b = p.bs[i]
		if p.bs[j].inflight < b.inflight {
			b = p.bs[j]
		}
	default:
		b = p.pickMu()
	}
	b.inflight++
	b.sent++
	return b
}

// capOf is the capacity Eq 5 uses for b: its own estimate, else the
// largest seen on the function (§3.4.1: a new pod is presumed as fast),
// else Little's law on the last execution time reported, concurrency/ET,
// else 0 (nothing is known). The caller holds p.mu.
func (p *Pool) capOf(b *Backend) float64 {
	switch {
	case b.cap > 0:
		return b.cap
	case p.maxCap > 0:
		return p.maxCap
	case p.Concurrency > 0 && p.lastET > 0:
		return float64(p.Concurrency) / p.lastET
	}
	return 0
}

// Known says whether any replica of the function has reported how fast it
// serves (a capacity estimate or an execution time).
func (p *Pool) Known() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxCap > 0 || p.lastET > 0
}

// PickFree is what Knative's activator does before anything is known of a
// function's speed: the replica with the fewest requests in flight among
// those below their concurrency, counted in flight; nil when every
// replica is full (or Concurrency is unset), so the caller holds the
// request instead of committing it to one replica's queue.
func (p *Pool) PickFree() *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b *Backend
	for _, c := range p.bs {
		if c.inflight < p.Concurrency && (b == nil || c.inflight < b.inflight) {
			b = c
		}
	}
	if b != nil {
		b.inflight++
		b.sent++
	}
	return b
}

// pickMu is Eq 5: the pod with the least R_i = (Q_i+1)/Cap_i. Q_i is the
// larger of the piggybacked queue (which sees other gateways' load) and
// this gateway's requests in flight (which sees its own dispatches before
// any response returns: without it a new, empty pod would take every
// request until its first answer).
func (p *Pool) pickMu() *Backend {
	n := len(p.bs)
	start := p.next % n
	p.next++
	var best *Backend
	bestR := math.Inf(1)
	for k := range n {
		c := p.bs[(start+k)%n]
		capi := p.capOf(c)
		if capi <= 0 {
			capi = 1 // nothing measured yet: all pods equal, least loaded wins
		}
		r := float64(max(c.pigQ, c.inflight)+1) / capi
		if r < bestR {
			best, bestR = c, r
		}
	}
	return best
}

// Done records the answer to a request sent to b; m is nil when the
// response carried no metrics (error, or a proxy without them).
func (p *Pool) Done(b *Backend, m *PodMetrics) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.inflight > 0 {
		b.inflight--
	}
	if m == nil {
		return
	}
	if m.ExecSec > 0 {
		p.lastET = m.ExecSec
	}
	b.pigQ = max(m.Queue, 0)
	// §3.4.1: update the capacity only when the new sample is at least as
	// confident or shows at least as high a departure rate, so a falling
	// arrival rate does not read as a falling capacity.
	// The proxy's values change once per T_c; act on each pair once.
	pair := [2]float64{m.Departure, m.Confidence}
	if pair == b.lastPig {
		return
	}
	b.lastPig = pair
	if m.Departure > 0 && (m.Confidence >= b.savedRat || m.Departure >= b.savedR) {
		c := m.Departure / max(m.Confidence, minRatio)
		if p.Concurrency > 0 && m.ExecSec > 0 {
			c = min(c, float64(p.Concurrency)/m.ExecSec)
		}
		c = max(c, m.Departure) // it did serve that much
		if b.cap > 0 && m.Departure > b.savedR && c < b.cap {
			// A departure rate still rising is no evidence of a lower
			// capacity: R_sd is an EWMA (Algorithm 1) and lags when a
			// pod becomes saturated, so R_sd/Ratio undershoots until it
			// catches up (§3.4.1 keeps the saved values for the same
			// reason when the rate falls). Keep the estimate; a saturated
			// pod whose departure rate has stopped rising sets it.
			c = b.cap
		}
		if b.cap > 0 {
			// Smooth: one interval's ratio is a noisy sample.
			c = 0.5*b.cap + 0.5*c
		}
		b.cap = c
		b.savedRat, b.savedR = m.Confidence, m.Departure
		p.maxCap = max(p.maxCap, b.cap)
	}
}

// BestResponse is the least estimated response time over the pods,
// min_i (Q_i+1)/Cap_i (Eq 5's R_i), in seconds: how long a request sent
// now would take at best. A pod without its own estimate counts at the
// capacity capOf presumes; ok is false when nothing is known yet or the
// pool is empty.
func (p *Pool) BestResponse() (sec float64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sec = math.Inf(1)
	for _, b := range p.bs {
		c := p.capOf(b)
		if c <= 0 {
			return 0, false
		}
		sec = min(sec, float64(max(b.pigQ, b.inflight)+1)/c)
	}
	return sec, len(p.bs) > 0
}

// Capacity is Cap_e for the autoscaler: the mean estimated capacity of the
// pods that have one (0 when none has).
func (p *Pool) Capacity() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s float64
	var k int
	for _, b := range p.bs {
		if b.cap > 0 {
			s += b.cap
			k++
		}
	}
	if k == 0 {
		return 0
	}
	return s / float64(k)
}

// Queued is the sum of the piggybacked queue lengths.
func (p *Pool) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := 0
	for _, b := range p.bs {
		q += b.pigQ
	}
	return q
}

// Inflight is the number of requests in flight over all pods.
func (p *Pool) Inflight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := 0
	for _, b := range p.bs {
		q += b.inflight
	}
	return q
}

// Slowest returns the ID of the pod with the lowest estimated capacity, the
// one §3.4.1 removes first on a scale-down (ties: the last added).
func (p *Pool) Slowest() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w *Backend
	wc := 0.0
	for _, b := range p.bs {
		c := b.cap
		if c <= 0 {
			c = p.maxCap // a new pod is presumed as fast as the best
		}
		if w == nil || c <= wc {
			w, wc = b, c
		}
	}
	if w == nil {
		return ""
	}
	return w.ID
}

// Stats copies the replica state.
func (p *Pool) Stats() []BackendStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]BackendStats, len(p.bs))
	for i, b := range p.bs {
		out[i] = BackendStats{ID: b.ID, Addr: b.Addr, Inflight: b.inflight, Queue: b.pigQ, Capacity: b.cap, Sent: b.sent}
	}
	return out
}
