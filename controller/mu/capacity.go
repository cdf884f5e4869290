// Package mu holds the decision logic of Mu (SoCC '21) as pure,
// clock-free code: the queue proxy's capacity estimation (Algorithm 1),
// the capacity-aware load balancer and its baselines (§3.4), the incoming
// rate predictor (Algorithm 2), the SLO-aware autoscaler (Eqs 1–4) and the
// Knative KPA-style baselines it is compared with (§3.3). The gateway, the
// queue proxy and the benchmarks wire these to real sockets and containers;
// every function here takes the time it needs as an argument so tests can
// drive it deterministically.
package mu

import (
	"sync"
	"time"
)

// Headers the queue proxy piggybacks on every response (§3.1); the gateway
// reads and strips them before the client sees the response.
const (
	HeaderQueue      = "X-Mu-Queue"      // queue length at dequeue of this request
	HeaderExecMs     = "X-Mu-Exec-Ms"    // EWMA execution time ET_avg, ms
	HeaderDeparture  = "X-Mu-Departure"  // smoothed departure rate R_sd, req/s
	HeaderConfidence = "X-Mu-Confidence" // confidence ratio Ratio_c, 0..1
)

// PodMetrics is what one response carries back to the gateway.
type PodMetrics struct {
	Queue      int     // Queue at dequeue
	ExecSec    float64 // ET_avg, seconds
	Departure  float64 // R_sd, req/s
	Confidence float64 // Ratio_c
}

// EstimatorConfig holds Algorithm 1's constants. Mu gives the 1 s
// default interval and the 10·ET_avg rule; it gives no value for the EWMA
// coefficients, so ours are configurable (docs/mu.md).
type EstimatorConfig struct {
	Alpha   float64       // EWMA weight of the old R_sd (line 27); default 0.8
	ETAlpha float64       // EWMA weight of the old ET_avg; default 0.8
	TcInit  time.Duration // default and idle floor of T_c (1 s)
	TcMin   time.Duration // lower bound of T_c (0.1 s)
	TcMax   time.Duration // upper bound of T_c (10 s)
}

func (c EstimatorConfig) withDefaults() EstimatorConfig {
	if c.Alpha <= 0 || c.Alpha >= 1 {
		c.Alpha = 0.8
	}
	if c.ETAlpha <= 0 || c.ETAlpha >= 1 {
		c.ETAlpha = 0.8
	}
	if c.TcInit <= 0 {
		c.TcInit = time.Second
	}
	if c.TcMin <= 0 {
		c.TcMin = 100 * time.Millisecond
	}
	if c.TcMax <= 0 {
		c.TcMax = 10 * time.Second
	}
	return c
}

// Ticket is one request inside the queue proxy: waiting, then in the user
// container.
type Ticket struct {
	confidence bool
	inService  bool
}

// Estimator is Algorithm 1 (Mu §3.1): it watches arrivals, dequeues
// and responses of one pod and, every adaptive interval T_c, turns them
// into a smoothed departure rate and a confidence ratio. It is safe for
// concurrent use.
type Estimator struct {
	cfg EstimatorConfig

	mu       sync.Mutex
	queue    int              // waiting requests (Queue)
	running  map[*Ticket]bool // requests in the user container (C_r = len)
	cd, cdc  int              // C_d, C_dc in the current interval
	et       float64          // ET_avg, seconds
	rsd      float64          // R_sd
	ratio    float64          // Ratio_c
	tc       time.Duration    // T_c
	lastTick time.Time
}

// NewEstimator starts an estimator whose first interval begins at now.
func NewEstimator(cfg EstimatorConfig, now time.Time) *Estimator {
	cfg = cfg.withDefaults()
	return &Estimator{cfg: cfg, running: map[*Ticket]bool{}, tc: cfg.TcInit, lastTick: now}
}

// Arrive records a request entering the queue (lines 1–5): its confidence
// flag is set when others are already waiting, i.e. the container is
// saturated.
func (e *Estimator) Arrive() *Ticket {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := &Ticket{confidence: e.queue > 0}
	e.queue++
	return t
}

// Abandon removes a waiting request that never reached the container
// (client gone, queue full).
func (e *Estimator) Abandon(t *Ticket) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !t.inService && e.queue > 0 {
		e.queue--
	}
}

// Dequeue moves a request into the user container and returns the queue
// length left behind, the value piggybacked as the queue length (§3.1).
func (e *Estimator) Dequeue(t *Ticket) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.queue > 0 {
		e.queue--
	}
	t.inService = true
	e.running[t] = true
	return e.queue
}

// Respond records the user container's response to t after exec (lines
// 6–16) and returns the metrics to piggyback on it.
func (e *Estimator) Respond(t *Ticket, exec time.Duration, queueAtDequeue int) PodMetrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.running, t)
	e.cd++
	if t.confidence {
		e.cdc++
	}
	if e.queue == 0 {
		// The container drained its queue while these ran: they no
		// longer prove saturation (lines 10–12).
		for r := range e.running {
			r.confidence = false
		}
	}
	x := exec.Seconds()
	if e.et == 0 {
		e.et = x
	} else {
		e.et = e.cfg.ETAlpha*e.et + (1-e.cfg.ETAlpha)*x
	}
	// Lines 13–16, read with the bounds the text gives (T_c grows up to
	// 10 s, shrinks down to 0.1 s); the printed max/min are swapped.
	ten := time.Duration(10 * e.et * float64(time.Second))
	if ten > 2*e.tc {
		e.tc = min(ten, e.cfg.TcMax)
	}
	if ten < e.tc/2 {
		e.tc = max(ten, e.cfg.TcMin)
	}
	return PodMetrics{Queue: queueAtDequeue, ExecSec: e.et, Departure: e.rsd, Confidence: e.ratio}
}

// Advance runs the per-interval update (lines 17–32) if T_c has passed
// since the last one; call it often (every response and from a ticker).
func (e *Estimator) Advance(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	el := now.Sub(e.lastTick)
	if el < e.tc {
		return
	}
	e.lastTick = now
	if e.cd == 0 && len(e.running) == 0 {
		e.rsd, e.et = 0, 0
		if e.tc > e.cfg.TcInit {
			e.tc = max(e.tc/2, e.cfg.TcInit)
		}
		e.ratio = 0
		return
	}
	// The elapsed time, not T_c, so a late tick does not inflate R_d.
	rd := float64(e.cd) / el.Seconds()
	if e.rsd == 0 {
		e.rsd = rd
	} else {
		e.rsd = e.cfg.Alpha*e.rsd + (1-e.cfg.Alpha)*rd
	}
	if e.cd > 0 {
		e.ratio = float64(e.cdc) / float64(e.cd)
	} else {
		e.ratio = 0
	}
	e.cd, e.cdc = 0, 0
}

// Snapshot returns the current metrics and interval.
func (e *Estimator) Snapshot() (PodMetrics, time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return PodMetrics{Queue: e.queue, ExecSec: e.et, Departure: e.rsd, Confidence: e.ratio}, e.tc
}
