package pema

import (
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"

	cpema "github.com/escra-dev/escra/controller/pema"
	"github.com/escra-dev/escra/internal/pemaapp"
)

// simApp is a clock-free model of the bench's app, fine enough to show
// what the real bench cannot show quickly: where PEMA, RULE and OPTM end
// on the same app, load and SLO. Six services as SixServices, each a
// processor-sharing server limited by a CFS quota per 100 ms period, all
// on one CPU that a background load shares; Poisson arrivals; front
// burns, then calls the a-chain and the b-chain in parallel and answers
// when both have. 1 ms steps. A model, not the measurement.
type simApp struct {
	svcs  []pemaapp.Service
	work  []float64 // ms of CPU per request per service
	rps   float64
	bg    float64 // mean share of the CPU the machine's other jobs take
	rng   *rand.Rand
	child [][]int
	// bursts: simRun's background also bursts (model_guard_test.go).
	bursts bool
}

func newSimApp(rps, msCPU, overhead, bg float64, seed uint64) *simApp {
	s := &simApp{svcs: pemaapp.SixServices(), rps: rps, bg: bg, rng: rand.New(rand.NewPCG(seed, 7))}
	idx := map[string]int{}
	for i, v := range s.svcs {
		idx[v.Name] = i
	}
	for _, v := range s.svcs {
		s.work = append(s.work, v.Scale*msCPU+overhead*float64(1+len(v.Next)))
		var c []int
		for _, n := range v.Next {
			c = append(c, idx[n])
		}
		s.child = append(s.child, c)
	}
	return s
}

type simJob struct {
	req  int
	left float64
	svc  int
}

// run simulates secs seconds under quotas x (cores) and returns the p95
// (s), per-second per-service usage (cores), u and h per service.
func (s *simApp) run(x []float64, secs float64) (p95 float64, usage [][]float64, u, h []float64) {
	n := len(s.svcs)
	steps := int(secs * 1000)
	jobs := make([][]*simJob, n)
	arrive := map[int]int{} // req -> ms
	var lat []float64
	used := make([]float64, n)
	sec := make([]float64, n)
	quotaLeft := make([]float64, n)
	throttled := make([]int, n)
	periods := 0
	bg := s.bg
	next := s.rng.ExpFloat64() / s.rps * 1000
	req := 0
	parentOf := make([]int, n)
	for i := range parentOf {
		parentOf[i] = -1
	}
	for i, cs := range s.child {
		for _, c := range cs {
			parentOf[c] = i
		}
	}
	// open[req][svc] counts children still open below svc.
	open := map[[2]int]int{}
	var done func(r, svc, t int)
	done = func(r, svc, t int) {
		p := parentOf[svc]
		if p < 0 {
			lat = append(lat, float64(t-arrive[r])/1000)
			delete(arrive, r)
			return
		}
		k := [2]int{r, p}
		open[k]--
		if open[k] == 0 {
			delete(open, k)
			done(r, p, t)
		}
	}
	for t := 0; t < steps; t++ {
		if t%100 == 0 {
			for i := range quotaLeft {
				quotaLeft[i] = x[i] * 100
			}
			periods++
			// the machine's other jobs: a random walk in [0, 0.6] around s.bg
			bg = math.Max(0, math.Min(0.6, bg+0.03*s.rng.NormFloat64()+0.1*(s.bg-bg)))
		}
		if t%1000 == 0 && t > 0 {
			usage = append(usage, sec)
			sec = make([]float64, n)
		}
		for float64(t) >= next {
			arrive[req] = t
			jobs[0] = append(jobs[0], &simJob{req: req, left: s.work[0], svc: 0})
			req++
			next += s.rng.ExpFloat64() / s.rps * 1000
		}
		// CPU this ms: 1 − background, shared by runnable services by
		// demand, each capped by its quota left.
		avail := 1 - bg
		want := make([]float64, n)
		var tot float64
		for i := range n {
			if len(jobs[i]) > 0 && quotaLeft[i] > 0 {
				var w float64
				for _, j := range jobs[i] {
					w += j.left
				}
				want[i] = math.Min(math.Min(1, w), quotaLeft[i])
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
			quotaLeft[i] -= g
			if quotaLeft[i] <= 1e-9 {
				throttled[i]++
			}
			used[i] += g
			sec[i] += g / 1000
			// processor sharing among the service's jobs
			per := g / float64(len(jobs[i]))
			var keep, fin []*simJob
			for _, j := range jobs[i] {
				j.left -= per
				if j.left <= 1e-9 {
					fin = append(fin, j)
				} else {
					keep = append(keep, j)
				}
			}
			jobs[i] = keep
			for _, j := range fin {
				cs := s.child[i]
				if len(cs) == 0 {
					done(j.req, i, t+1)
					continue
				}
				open[[2]int{j.req, i}] = len(cs)
				for _, c := range cs {
					jobs[c] = append(jobs[c], &simJob{req: j.req, left: s.work[c], svc: c})
				}
			}
		}
	}
	// requests still open count with their age (the client sees them late)
	for _, a := range arrive {
		lat = append(lat, float64(steps-a)/1000)
	}
	sort.Float64s(lat)
	if len(lat) > 0 {
		p95 = lat[int(math.Ceil(0.95*float64(len(lat))))-1]
	}
	u, h = make([]float64, n), make([]float64, n)
	for i := range n {
		u[i] = used[i] / (x[i] * 1000 * secs)
		h[i] = float64(throttled[i]) / float64(periods)
	}
	return p95, usage, u, h
}

func sumf(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// TestModelPolicies runs PEMA (the controller's own code), RULE (Rule on
// 1 s usage samples of the last three intervals, every interval) and OPTM
// (OPTM with two 4 s windows per trial) on the model at 60 rps, SLO 3× the
// p95 at the ample start, with a quiet and a busy background, six seeds.
// It only logs: PEMA_MODEL=1 to run it (~10 s), PEMA_MODEL=v for PEMA's
// steps on seed 1, PEMA_K=1..9 to override K, PEMA_SLO_X=1 or 2 for an SLO of 10× or 20× the
// baseline (what a busy machine's baseline made of the bench's 3×). docs/pema.md has its output.
func TestModelPolicies(t *testing.T) {
	if os.Getenv("PEMA_MODEL") == "" {
		t.Skip("PEMA_MODEL=1 runs the model")
	}
	const interval = 10.0
	for _, bgm := range []float64{0.05, 0.3} {
		for seed := range uint64(6) {
			app := newSimApp(60, 0.3, 0.15, bgm, seed)
			x0 := []float64{0.25, 0.25, 0.25, 0.25, 0.25, 0.25}
			base, _, _, _ := app.run(x0, 3*interval)
			slo := 3 * base
			if f := os.Getenv("PEMA_SLO_X"); f != "" {
				slo = float64(f[0]-'0') * 10 * base // PEMA_SLO_X=1: 10×, 2: 20× (a loaded machine's baseline)
			}
			// OPTM
			holds := func(x []float64) bool { p, _, _, _ := app.run(x, 8); return p <= slo }
			xo, trials := OPTM(x0, 0.05, 0.0125, 0.01, 50, holds)
			// RULE
			xr := append([]float64(nil), x0...)
			var hist [][]float64
			var rcpu, rv []float64
			for it := range 10 {
				p, us, _, _ := app.run(xr, interval)
				hist = append(hist, us...)
				if len(hist) > 30 {
					hist = hist[len(hist)-30:]
				}
				if it >= 5 {
					rcpu = append(rcpu, sumf(xr))
					if p > slo {
						rv = append(rv, 1)
					}
				}
				for j := range xr {
					var s []float64
					for _, row := range hist {
						s = append(s, row[j])
					}
					xr[j] = Rule(s, 0.01)
				}
			}
			// PEMA
			c := cpema.DefaultConfig(slo)
			c.MinCPU, c.Budget = 0.01, 1.5
			if k := os.Getenv("PEMA_K"); k != "" {
				c.K = int(k[0] - '0')
			}
			in, _ := cpema.NewInstance(c, x0, nil, seed)
			x := x0
			var pcpu []float64
			viol, rb := 0, 0
			steps := 36
			for it := range steps {
				p, _, u, h := app.run(x, interval)
				if p > slo {
					viol++
				}
				if it >= steps-12 {
					pcpu = append(pcpu, sumf(x))
				}
				st, err := in.Step(cpema.Obs{P95: p, RPS: 60, U: u, H: h})
				if err != nil {
					t.Fatal(err)
				}
				if st.Kind == cpema.KindRollback {
					rb++
				}
				if os.Getenv("PEMA_MODEL") == "v" && seed == 1 {
					t.Logf("  %2d p95 %4.0f ms %-8s Σ %.3f → %.3f s=%.2f cut %v x %.3f u %.2f h %.2f", it, p*1e3, st.Kind, sumf(x), sumf(st.X), st.S, st.Cut, st.X, u, h)
				}
				x = st.X
			}
			pm, rm := mean(pcpu), mean(rcpu)
			t.Logf("bg %.1f seed %d: base p95 %.0f ms, SLO %.0f ms | OPTM %.3f (%d trials) | RULE %.3f (%d/5 viol) | PEMA %.3f (%d viol, %d rb) → /OPTM %.2f, vs RULE %+.0f%%",
				bgm, seed, base*1e3, slo*1e3, sumf(xo), trials, rm, len(rv), pm, viol, rb, pm/sumf(xo), 100*(pm/rm-1))
		}
	}
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return sumf(v) / float64(len(v))
}
