package recommender

import (
	"math"
	"sort"
	"time"
)

// Autopilot-style recommender (Rzadca et al., "Autopilot: workload
// autoscaling at Google", EuroSys 2020, §3.2 moving window and §3.3 ML
// recommender), as recreated by Escra §VI-A.
//
// Each arm i is a moving-window statistic over exponentially decayed usage
// samples, times a safety margin:
//
//	w(s)  = 2^(-(now - s.T)/HalfLife)         for samples inside Window
//	L_i   = M_i · stat_i({s}, w)               stat ∈ {max, weighted p_q}
//
// At each update (every Interval, 1 s: the best case the Escra paper gave it) the
// cost each arm would have incurred since the last update, with the limit it
// recommended last time, is folded into a decayed running cost:
//
//	o_i = Σ_s max(0, u_s - L_i^prev)          (overrun: demand above limit)
//	u_i = Σ_s max(0, L_i^prev - u_s)          (underrun: slack)
//	c_i ← D·c_i + (1-D)·(w_o·o_i + w_u·u_i + w_Δ·[L_i ≠ L_i^prev])
//
// and the selector picks
//
//	argmin_i  c_i + w_Δm·[i ≠ current arm] + w_Δ·[L_i ≠ current limit]
//
// CPU and memory run the same machinery with their own weights.
type Autopilot struct {
	CPU, Mem *AutopilotSeries
	Every    time.Duration
	Label    string
}

// Arm is one moving-window recommender.
type Arm struct {
	Stat   string  // "max" or "pNN" (weighted percentile, e.g. "p95")
	Q      float64 // quantile in (0,1] for percentile arms
	Margin float64 // safety margin multiplier M_i ≥ 1
}

// AutopilotConfig parameterises one resource's recommender.
type AutopilotConfig struct {
	Window   time.Duration // samples older than this are dropped
	HalfLife time.Duration // decay half-life of sample weights (0: no decay)
	Arms     []Arm
	D        float64 // decay of the running cost per update, in [0,1)
	Wo, Wu   float64 // overrun and underrun weights (per unit·sample)
	WDelta   float64 // cost of changing the limit
	WSwitch  float64 // cost of switching arms
	Min      float64 // floor of a recommendation
}

// DefaultAutopilotCPU and DefaultAutopilotMem are the tuned values used by
// the benchmarks (Escra §VI-A: the weights are not published, tuned for
// best performance). Overrun of CPU costs 10× a core of slack, of memory
// (OOM risk) 50×.
func DefaultAutopilotCPU() AutopilotConfig {
	return AutopilotConfig{
		Window: 60 * time.Second, HalfLife: 15 * time.Second,
		Arms: defaultArms(),
		D:    0.8, Wo: 10, Wu: 1, WDelta: 0.05, WSwitch: 0.05, Min: 0.05,
	}
}

func DefaultAutopilotMem() AutopilotConfig {
	return AutopilotConfig{
		Window: 120 * time.Second, HalfLife: 30 * time.Second,
		Arms: defaultArms(),
		D:    0.8, Wo: 50, Wu: 1, WDelta: 1 << 20, WSwitch: 1 << 20, Min: 16 << 20,
	}
}

func defaultArms() []Arm {
	var arms []Arm
	for _, m := range []float64{1.0, 1.1, 1.25} {
		arms = append(arms, Arm{Stat: "max", Q: 1, Margin: m},
			Arm{Stat: "p95", Q: 0.95, Margin: m},
			Arm{Stat: "p50", Q: 0.50, Margin: m})
	}
	return arms
}

// NewAutopilot builds the recommender updated every interval (1 s in the benchmarks).
func NewAutopilot(cpu, mem AutopilotConfig, interval time.Duration) *Autopilot {
	return &Autopilot{CPU: NewAutopilotSeries(cpu), Mem: NewAutopilotSeries(mem), Every: interval}
}

func (a *Autopilot) Name() string {
	if a.Label != "" {
		return a.Label
	}
	return "autopilot"
}
func (a *Autopilot) Interval() time.Duration { return a.Every }
func (a *Autopilot) Observe(s Sample) {
	a.CPU.Observe(s.T, s.CPU)
	a.Mem.Observe(s.T, s.MemBytes)
}

// ObserveOOM counts the kill as a sample at the usage reached plus the
// overrun it stands for; Autopilot reacts to OOMs only through its
// recommenders (their max arms see the peak).
func (a *Autopilot) ObserveOOM(t time.Time, mem float64) { a.Mem.Observe(t, mem) }

func (a *Autopilot) Recommend(now time.Time) (Limits, bool) {
	c, okc := a.CPU.Update(now)
	m, okm := a.Mem.Update(now)
	return Limits{CPU: c, MemBytes: m}, okc || okm
}

type point struct {
	t time.Time
	v float64
}

// AutopilotSeries is the recommender and selector for one resource.
type AutopilotSeries struct {
	cfg      AutopilotConfig
	samples  []point // inside Window, time order
	fresh    int     // index of the first sample since the last update
	prev     []float64
	cost     []float64
	cur      int // selected arm, -1 before the first update
	curLimit float64
}

func NewAutopilotSeries(cfg AutopilotConfig) *AutopilotSeries {
	return &AutopilotSeries{cfg: cfg, prev: make([]float64, len(cfg.Arms)),
		cost: make([]float64, len(cfg.Arms)), cur: -1}
}

func (s *AutopilotSeries) Observe(t time.Time, v float64) {
	s.samples = append(s.samples, point{t, v})
}

// Selected returns the arm in use and the current limit.
func (s *AutopilotSeries) Selected() (Arm, float64) {
	if s.cur < 0 {
		return Arm{}, 0
	}
	return s.cfg.Arms[s.cur], s.curLimit
}

// Update runs one selector step at now and returns the limit.
func (s *AutopilotSeries) Update(now time.Time) (float64, bool) {
	// Drop samples older than the window.
	cut := 0
	for cut < len(s.samples) && now.Sub(s.samples[cut].t) > s.cfg.Window {
		cut++
	}
	s.samples = s.samples[cut:]
	s.fresh -= cut
	if s.fresh < 0 {
		s.fresh = 0
	}
	if len(s.samples) == 0 {
		return s.curLimit, s.cur >= 0
	}
	// Cost of each arm's previous recommendation on the samples since then.
	rec := make([]float64, len(s.cfg.Arms))
	for i, arm := range s.cfg.Arms {
		rec[i] = math.Max(s.cfg.Min, arm.Margin*s.stat(arm, now))
		if s.cur >= 0 {
			var o, u float64
			for _, p := range s.samples[s.fresh:] {
				o += math.Max(0, p.v-s.prev[i])
				u += math.Max(0, s.prev[i]-p.v)
			}
			changed := 0.0
			if rec[i] != s.prev[i] {
				changed = 1
			}
			s.cost[i] = s.cfg.D*s.cost[i] + (1-s.cfg.D)*(s.cfg.Wo*o+s.cfg.Wu*u+s.cfg.WDelta*changed)
		}
	}
	best, bestCost := 0, math.Inf(1)
	for i := range s.cfg.Arms {
		c := s.cost[i]
		if s.cur >= 0 {
			if i != s.cur {
				c += s.cfg.WSwitch
			}
			if rec[i] != s.curLimit {
				c += s.cfg.WDelta
			}
		}
		if c < bestCost {
			best, bestCost = i, c
		}
	}
	if s.cur < 0 {
		// No history of costs yet: start with the safest arm (largest limit).
		for i := range rec {
			if rec[i] > rec[best] {
				best = i
			}
		}
	}
	copy(s.prev, rec)
	s.cur, s.curLimit = best, rec[best]
	s.fresh = len(s.samples)
	return s.curLimit, true
}

// stat computes an arm's statistic over the decayed window at now.
func (s *AutopilotSeries) stat(arm Arm, now time.Time) float64 {
	if arm.Stat == "max" || arm.Q >= 1 {
		m := 0.0
		for _, p := range s.samples {
			m = math.Max(m, p.v)
		}
		return m
	}
	type wv struct{ v, w float64 }
	ws := make([]wv, len(s.samples))
	total := 0.0
	for i, p := range s.samples {
		w := 1.0
		if s.cfg.HalfLife > 0 {
			w = math.Exp2(-now.Sub(p.t).Seconds() / s.cfg.HalfLife.Seconds())
		}
		ws[i] = wv{p.v, w}
		total += w
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].v < ws[j].v })
	acc := 0.0
	for _, x := range ws {
		acc += x.w
		if acc >= arm.Q*total-1e-12 {
			return x.v
		}
	}
	return ws[len(ws)-1].v
}
