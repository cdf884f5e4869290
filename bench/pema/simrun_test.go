package pema

import (
	"math"
	"sort"
)

// simRun is simApp run continuously (queues carry over from one call to
// the next), which a loop acting inside an interval needs: the same
// services, CPU and background as run, plus, when escra is set, Escra's
// per-period rule on the quotas a policy sets (a service that runs out of
// its quota mid-period is raised at once by max(q, U/λ) from the app's
// unassigned budget U, for the rest of the period; Escra's OnThrottle), and a load that may vary
// (rate, requests per second at a time in ms).
type simRun struct {
	s        *simApp
	rate     func(ms int) float64
	escra    bool
	omega    float64
	n        int
	t        int
	jobs     [][]*simJob
	arrive   map[int]int
	open     map[[2]int]int
	parentOf []int
	next     float64
	req      int
	bg       float64
	left     []float64 // quota left this period, ms of CPU
	quota    []float64 // quota in force this period, cores
	raised   []bool    // raised during this period
	thr      []bool    // throttled during this period
	curUsed  []float64 // used this period, ms of CPU
	qms      []float64 // quota in force this period, core·ms
	// bursts: the background also takes 85 % of the CPU now and then.
	bursts    bool
	burstLeft int // periods
	// Per-period records and completed requests, for any window.
	per  []simPeriod
	done []simSample
}

type simPeriod struct {
	quota, used []float64
	thr, raised []bool
}

type simSample struct {
	at, lat float64 // completion time (s), latency (s)
}

func (s *simApp) start(rate func(ms int) float64, escra bool, omega float64) *simRun {
	n := len(s.svcs)
	r := &simRun{s: s, rate: rate, escra: escra, omega: omega, n: n, jobs: make([][]*simJob, n), arrive: map[int]int{},
		open: map[[2]int]int{}, parentOf: make([]int, n), bg: s.bg, left: make([]float64, n), quota: make([]float64, n),
		raised: make([]bool, n), thr: make([]bool, n)}
	for i := range r.parentOf {
		r.parentOf[i] = -1
	}
	for i, cs := range s.child {
		for _, c := range cs {
			r.parentOf[c] = i
		}
	}
	r.next = s.rng.ExpFloat64() / rate(0) * 1000
	return r
}

func (r *simRun) finish(req, svc, t int) {
	p := r.parentOf[svc]
	if p < 0 {
		r.done = append(r.done, simSample{at: float64(t) / 1000, lat: float64(t-r.arrive[req]) / 1000})
		delete(r.arrive, req)
		return
	}
	k := [2]int{req, p}
	r.open[k]--
	if r.open[k] == 0 {
		delete(r.open, k)
		r.finish(req, p, t)
	}
}

// advance runs ms milliseconds under target quotas x (cores).
func (r *simRun) advance(x []float64, ms int) {
	n := r.n
	for end := r.t + ms; r.t < end; r.t++ {
		if r.t%100 == 0 {
			if r.t > 0 {
				qs := r.qms
				for i := range qs {
					qs[i] /= 100
				}
				r.per = append(r.per, simPeriod{quota: qs, used: r.per0(), thr: append([]bool(nil), r.thr...), raised: append([]bool(nil), r.raised...)})
			}
			r.qms = make([]float64, n)
			for i := range n {
				// The raise lasts the rest of its period; the next starts
				// at PEMA's quota again.
				q := x[i]
				r.quota[i], r.left[i] = q, q*100
				r.raised[i], r.thr[i] = false, false
			}
			r.bg = math.Max(0, math.Min(0.6, r.bg+0.03*r.s.rng.NormFloat64()+0.1*(r.s.bg-r.bg)))
			if r.bursts {
				// another job's burst: 85 % of the CPU for 0.5–2 s, one
				// every 120 s on average (the real runs' 400–1,800 ms intervals)
				if r.burstLeft > 0 {
					r.burstLeft--
				} else if r.s.rng.Float64() < 1.0/1200 {
					r.burstLeft = 5 + r.s.rng.IntN(16)
				}
			}
		}
		bgNow := r.bg
		if r.burstLeft > 0 {
			bgNow = 0.85
		}
		for float64(r.t) >= r.next {
			r.arrive[r.req] = r.t
			r.jobs[0] = append(r.jobs[0], &simJob{req: r.req, left: r.s.work[0], svc: 0})
			r.req++
			r.next += r.s.rng.ExpFloat64() / math.Max(r.rate(r.t), 0.1) * 1000
		}
		for i := range n {
			r.qms[i] += r.quota[i] // quota in force, time-weighted
		}
		avail := 1 - bgNow
		want := make([]float64, n)
		var tot float64
		for i := range n {
			if len(r.jobs[i]) > 0 && r.left[i] > 0 {
				var w float64
				for _, j := range r.jobs[i] {
					w += j.left
				}
				want[i] = math.Min(math.Min(1, w), r.left[i])
				tot += want[i]
			}
		}
		scale := 1.0
		if tot > avail {
			scale = avail / tot
		}
		for i := range n {
			g := want[i] * scale
			if g <= 0 {
				continue
			}
			r.left[i] -= g
			r.usedNow(i, g)
			if r.left[i] <= 1e-9 {
				r.thr[i] = true
				if r.escra && !r.raised[i] {
					var tq float64
					for _, q := range r.quota {
						tq += q
					}
					add := math.Max(r.quota[i], (r.omega-tq)/float64(n))
					add = math.Max(0, math.Min(add, r.omega-tq))
					if add > 0 {
						r.quota[i] += add
						r.left[i] += add * float64(100-r.t%100)
						r.raised[i] = true
					}
				}
			}
			per := g / float64(len(r.jobs[i]))
			var keep, fin []*simJob
			for _, j := range r.jobs[i] {
				j.left -= per
				if j.left <= 1e-9 {
					fin = append(fin, j)
				} else {
					keep = append(keep, j)
				}
			}
			r.jobs[i] = keep
			for _, j := range fin {
				cs := r.s.child[i]
				if len(cs) == 0 {
					r.finish(j.req, i, r.t+1)
					continue
				}
				r.open[[2]int{j.req, i}] = len(cs)
				for _, c := range cs {
					r.jobs[c] = append(r.jobs[c], &simJob{req: j.req, left: r.s.work[c], svc: c})
				}
			}
		}
	}
}

func (r *simRun) usedNow(i int, g float64) {
	if r.curUsed == nil {
		r.curUsed = make([]float64, r.n)
	}
	r.curUsed[i] += g
}

func (r *simRun) per0() []float64 {
	u := r.curUsed
	if u == nil {
		u = make([]float64, r.n)
	}
	r.curUsed = nil
	for i := range u {
		u[i] /= 100 // cores over the period
	}
	return u
}

// p95 of the requests that completed in [from, to) seconds, and how many.
func (r *simRun) p95(from, to float64) (float64, int) {
	var lat []float64
	for j := len(r.done) - 1; j >= 0 && r.done[j].at >= from; j-- {
		if r.done[j].at < to {
			lat = append(lat, r.done[j].lat)
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	sort.Float64s(lat)
	return lat[int(math.Ceil(0.95*float64(len(lat))))-1], len(lat)
}

// clientP95 is what a client sees of [from, to): completions in it and
// the requests still open at its end, at their age (the client counts
// them late; the bench's client times out at 3 s).
func (r *simRun) clientP95(from, to float64) float64 {
	var lat []float64
	for j := len(r.done) - 1; j >= 0 && r.done[j].at >= from; j-- {
		if r.done[j].at < to {
			lat = append(lat, math.Min(r.done[j].lat, 3))
		}
	}
	for _, a := range r.arrive {
		if age := to - float64(a)/1000; age > 0 && float64(a)/1000 >= from-3 {
			lat = append(lat, math.Min(age, 3))
		}
	}
	if len(lat) == 0 {
		return 0
	}
	sort.Float64s(lat)
	return lat[int(math.Ceil(0.95*float64(len(lat))))-1]
}

// window sums the periods [p0, p1): u and h per service as PEMA's loop
// reads them, the share of periods Escra's rule raised, and the mean Σ
// quota in force.
func (r *simRun) window(p0, p1 int) (u, h, raised []float64, cpu float64) {
	n := r.n
	u, h, raised = make([]float64, n), make([]float64, n), make([]float64, n)
	q := make([]float64, n)
	p1 = min(p1, len(r.per))
	if p1 <= p0 {
		return u, h, raised, 0
	}
	for _, p := range r.per[p0:p1] {
		for i := range n {
			q[i] += p.quota[i]
			u[i] += p.used[i]
			if p.thr[i] {
				h[i]++
			}
			if p.raised[i] {
				raised[i]++
			}
			cpu += p.quota[i]
		}
	}
	k := float64(p1 - p0)
	for i := range n {
		if q[i] > 0 {
			u[i] /= q[i]
		}
		h[i] /= k
		raised[i] /= k
	}
	return u, h, raised, cpu / k
}

func clone(v []float64) []float64 { return append([]float64(nil), v...) }
