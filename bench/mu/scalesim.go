package mu

import (
	"container/heap"
	"math/rand"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
)

// ScaleSim is a clock-free replay of Table 3's loop: Poisson arrivals
// from a per-second rate trace, queue proxies (concurrency, FIFO queue,
// the real Algorithm 1 estimator), the real pool and autoscaler driven
// every 2 s epoch as the gateway drives them, and replicas that take
// Startup to become ready. It is a model, not the benchmark: it lets the
// autoscalers be compared on a trace in milliseconds, and says which of
// Eq 1 and Eq 2 asked for each replica (docs/mu.md).
type ScaleSim struct {
	Rates       []float64 // req/s, one per second
	Autoscaler  string
	LB          string
	Concurrency int
	ExecSec     float64 // service time per request (fixed, a hold)
	MaxQueue    int
	SLO         time.Duration
	Grace       int
	Ceiling     int
	Startup     time.Duration // create → ready
	Seed        int64
	Estimator   mu.EstimatorConfig // the queue proxies' Algorithm 1 constants
	KPAStable   time.Duration      // the RPS baseline's stable window (0: Knative's 60 s)
	Admission   string             // gateway.Function.Admission ("" = the gateway's default)
	// Warm starts every policy warm, as the benchmark does: InitialReplicas
	// ready at time 0 and WarmSeconds at the trace's opening rate first,
	// neither measured.
	InitialReplicas int
	WarmSeconds     int
}

// SimEpoch is one epoch of a ScaleSim run.
type SimEpoch struct {
	At         float64
	Obs        mu.Observation
	NIR, NQ    int
	Pred       float64
	Desired    int
	ReadyAfter int
}

// SimResult sums up a ScaleSim run like the benchmark does.
type SimResult struct {
	WithinSLOPct     float64
	PodsAvg          float64 // replicas ready, sampled each second
	PodsMax          int
	Rejected, Served int
	Epochs           []SimEpoch
}

type simEv struct {
	at   float64
	kind int // 0 arrival, 1 completion, 2 pod ready, 3 epoch
	pod  *simReplica
	req  *simReq
}

type simEvs []*simEv

func (h simEvs) Len() int           { return len(h) }
func (h simEvs) Less(i, j int) bool { return h[i].at < h[j].at }
func (h simEvs) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simEvs) Push(x any)        { *h = append(*h, x.(*simEv)) }
func (h *simEvs) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

type simReq struct {
	sent float64
	tk   *mu.Ticket
	q    int
	b    *mu.Backend
}

type simReplica struct {
	id      string
	running int
	waiting []*simReq
	est     *mu.Estimator
}

// Run replays the trace and returns the outcome.
func (s ScaleSim) Run() (SimResult, error) {
	t0 := time.Unix(0, 0)
	clock := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Second))) }
	pool, err := mu.NewPool(s.LB, s.Seed)
	if err != nil {
		return SimResult{}, err
	}
	pool.Concurrency = s.Concurrency
	as, err := mu.NewAutoscaler(s.Autoscaler, mu.MuConfig{SLO: s.SLO, Grace: s.Grace, Concurrency: s.Concurrency},
		float64(s.Concurrency)/s.ExecSec)
	if s.Autoscaler == mu.ASConcurrency {
		as, err = mu.NewAutoscaler(s.Autoscaler, mu.MuConfig{}, float64(s.Concurrency))
	}
	if s.KPAStable > 0 && s.Autoscaler == mu.ASRPS {
		as, err = mu.NewKPA(mu.KPAConfig{Metric: mu.ASRPS, Target: float64(s.Concurrency) / s.ExecSec, StableWindow: s.KPAStable})
	}
	if err != nil {
		return SimResult{}, err
	}
	rng := rand.New(rand.NewSource(s.Seed))
	h := &simEvs{}
	warm := float64(s.WarmSeconds)
	rates := append(WarmUp(s.Rates, s.WarmSeconds), s.Rates...)
	dur := float64(len(rates))
	for sec, r := range rates {
		if r <= 0 {
			continue
		}
		for at := float64(sec) + rng.ExpFloat64()/r; at < float64(sec+1); at += rng.ExpFloat64() / r {
			heap.Push(h, &simEv{at: at})
		}
	}
	ep := mu.Epoch.Seconds()
	for at := ep; at <= dur+30; at += ep {
		heap.Push(h, &simEv{at: at, kind: 3})
	}
	var (
		res                   SimResult
		ready                 = map[string]*simReplica{}
		all                   []*simReplica
		pending, nextID       int
		held                  []*simReq
		arrivals, area, lastT float64
		inflight              int
		et                    float64
		within, total         int
		nextSample            = 1.0
		want                  int // the autoscaler's last N_des, before the ceiling
		admission             = (&gateway.Function{Autoscaler: s.Autoscaler, Admission: s.Admission}).AdmissionMode()
		slo                   = s.SLO.Seconds()
	)
	for range s.InitialReplicas {
		nextID++
		p := &simReplica{id: "r" + itoa(nextID), est: mu.NewEstimator(s.Estimator, clock(0))}
		pool.Add(p.id, p.id)
		ready[p.id] = p
		all = append(all, p)
	}
	// What a request sent during the warm-up does is not counted.
	measured := func(r *simReq) bool { return r.sent >= warm }
	refuse := func(r *simReq) {
		if measured(r) {
			res.Rejected++
			total++
		}
		inflight--
	}
	track := func(now float64) {
		area += float64(inflight) * (now - lastT)
		lastT = now
	}
	var dispatch func(r *simReq, now float64)
	start := func(p *simReplica, r *simReq, now float64) {
		p.running++
		r.q = p.est.Dequeue(r.tk)
		heap.Push(h, &simEv{at: now + s.ExecSec, kind: 1, pod: p, req: r})
	}
	dispatch = func(r *simReq, now float64) {
		if pool.Len() == 0 {
			held = append(held, r)
			if pending == 0 {
				// The gateway's kick: a first replica at once.
				pending++
				nextID++
				p := &simReplica{id: "r" + itoa(nextID), est: mu.NewEstimator(s.Estimator, clock(now+s.Startup.Seconds()))}
				heap.Push(h, &simEv{at: now + s.Startup.Seconds(), kind: 2, pod: p})
			}
			return
		}
		var b *mu.Backend
		if !pool.Known() {
			// The gateway's activate: a free concurrency slot or wait.
			if b = pool.PickFree(); b == nil {
				held = append(held, r)
				return
			}
		} else {
			// The gateway's reject: the best estimated response exceeds
			// what is left of the SLO.
			best, ok := pool.BestResponse()
			left := time.Duration((slo - (now - r.sent)) * float64(time.Second))
			if gateway.Refuses(admission, want > s.Ceiling, best, ok, left) {
				refuse(r)
				return
			}
			b = pool.Pick()
		}
		p := ready[b.ID]
		r.b = b
		if p.running < s.Concurrency {
			r.tk = p.est.Arrive()
			start(p, r, now)
			return
		}
		if len(p.waiting) >= s.MaxQueue {
			pool.Done(b, nil)
			refuse(r)
			return
		}
		r.tk = p.est.Arrive()
		p.waiting = append(p.waiting, r)
	}
	for h.Len() > 0 {
		e := heap.Pop(h).(*simEv)
		for nextSample <= e.at && nextSample <= dur {
			if nextSample > warm {
				n := len(ready)
				res.PodsAvg += float64(n)
				res.PodsMax = max(res.PodsMax, n)
			}
			nextSample++
		}
		track(e.at)
		for _, p := range all {
			p.est.Advance(clock(e.at))
		}
		switch e.kind {
		case 0:
			arrivals++
			inflight++
			dispatch(&simReq{sent: e.at}, e.at)
		case 1:
			p, r := e.pod, e.req
			m := p.est.Respond(r.tk, time.Duration(s.ExecSec*float64(time.Second)), r.q)
			pool.Done(r.b, &m)
			if et == 0 {
				et = m.ExecSec
			} else {
				et = 0.9*et + 0.1*m.ExecSec
			}
			inflight--
			if measured(r) {
				total++
				res.Served++
				if e.at-r.sent <= slo {
					within++
				}
			}
			p.running--
			if len(p.waiting) > 0 {
				n := p.waiting[0]
				p.waiting = p.waiting[1:]
				start(p, n, e.at)
			}
			hs := held
			held = nil
			for _, r := range hs {
				dispatch(r, e.at)
			}
		case 2:
			pending--
			p := e.pod
			pool.Add(p.id, p.id)
			ready[p.id] = p
			all = append(all, p)
			hs := held
			held = nil
			for _, r := range hs {
				dispatch(r, e.at)
			}
		case 3:
			if e.at > dur && arrivals == 0 && inflight == 0 {
				continue
			}
			q := 0
			for _, b := range pool.Stats() {
				q += b.Queue
			}

			o := mu.Observation{Ready: len(ready) + pending, Arrivals: arrivals, EpochSec: ep, Concurrency: area / ep,
				Queued: float64(q + len(held)), CapE: pool.Capacity(), ExecSec: et}
			arrivals, area = 0, 0
			d := as.Desired(o)
			want = d
			rec := SimEpoch{At: e.at, Obs: o, Desired: d}
			if m, ok := as.(*mu.MuAutoscaler); ok {
				rec.NIR, rec.NQ = m.Terms()
				rec.Pred = m.Predicted()
			}
			d = min(d, s.Ceiling)
			cur := len(ready) + pending
			for ; cur < d; cur++ {
				pending++
				nextID++
				p := &simReplica{id: "r" + itoa(nextID), est: mu.NewEstimator(s.Estimator, clock(e.at+s.Startup.Seconds()))}
				heap.Push(h, &simEv{at: e.at + s.Startup.Seconds(), kind: 2, pod: p})
			}
			if d < cur && pending == 0 {
				for k := cur - d; k > 0 && len(ready) > 0; k-- {
					id := pool.Slowest()
					delete(ready, id)
					pool.Remove(id)
				}
			}
			rec.ReadyAfter = len(ready)
			res.Epochs = append(res.Epochs, rec)
		}
	}
	if n := min(nextSample-1, dur) - warm; n > 0 {
		res.PodsAvg /= n
	}
	if total > 0 {
		res.WithinSLOPct = 100 * float64(within) / float64(total)
	}
	return res, nil
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
