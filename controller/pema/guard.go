package pema

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// GuardConfig is what the pema-guarded policy adds to PEMA, each answer
// to a limitation PEMA's own last section (§6) names. Nil in Config: PEMA
// exactly as the paper (policy pema). docs/pema-guarded.md has
// what each does on the model.
type GuardConfig struct {
	// Margin: no cut whose predicted p95 exceeds Margin × R (the target
	// of Eqs 3/4/8). 0.85: §3.3's buffer (95 %) is for a measurement, this
	// one for a prediction from a fit.
	Margin float64
	// Degree: a rollback goes further back in RHDb the larger the
	// overshoot (§6: "a QoS violation where the response time is
	// significantly higher than the SLO indicates that PEMA should roll
	// back the configuration farther into the past"): one step back per
	// DegreeStep of overshoot (r/R_SLO − 1), at most MaxDepth.
	// False: Alg. 1 line 4 (the least Σx without a violation).
	Degree     bool
	DegreeStep float64
	MaxDepth   int
	// Fit: cuts are decided from RHDb (§6: RHDb is logged "for rollback
	// and exploration purposes, [but PEMA] does not utilize this
	// information in its decision"): Fit's predicted latency per core
	// saved, smallest first, instead of Eq 5's random pick.
	Fit bool
	// RaiseShare: a service that Escra's per-period rule raised in more
	// than this share of an interval's periods was cut too deep: its last
	// cut is undone and marked unsafe (0: the signal is ignored).
	RaiseShare float64
}

// DefaultGuard is what the model's ablation kept (docs/pema-guarded.md,
// "Ablation on the model"): the fit (Margin 0.85) and the raise signal (RaiseShare 0.3:
// at 0.02 it undid cuts Escra's rule covered at 12 ms of a 36 ms SLO).
// Degree is off: on the model it only ever added CPU (DegreeStep 0.5 and
// 2 alike) for no fewer violations. The sliding p95 (controller/pemaloop)
// is on wherever the guard is.
func DefaultGuard() GuardConfig {
	return GuardConfig{Margin: 0.85, Degree: false, DegreeStep: 0.5, MaxDepth: 8, Fit: true, RaiseShare: 0.3}
}

// Validate checks the guard's parameters.
func (g GuardConfig) Validate() error {
	switch {
	case !(g.Margin > 0) || g.Margin > 1:
		return fmt.Errorf("pema guard: margin %v: want 0 < margin <= 1", g.Margin)
	case g.Degree && (!(g.DegreeStep > 0) || g.MaxDepth < 1):
		return errors.New("pema guard: degree step > 0 and max depth >= 1")
	case !(g.RaiseShare >= 0) || g.RaiseShare > 1:
		return fmt.Errorf("pema guard: raise share %v: want 0..1", g.RaiseShare)
	}
	return nil
}

// KindUndo: the guard undid a cut that Escra's per-period rule had to
// make up for (pema-guarded only).
const KindUndo Kind = "undo"

// guardState is one instance's (one workload range's) guard.
type guardState struct {
	// unsafe[i]: a cut of service i to this many cores broke the SLO in
	// this range; later cuts stay above it (halfway, then not at all).
	unsafe []float64
	// The cut in force, if the last step was one: what it cut, from what.
	cutIdx  []int
	cutFrom []float64
}

func newGuardState(n int) *guardState { return &guardState{unsafe: make([]float64, n)} }

func (g *guardState) clone() *guardState {
	if g == nil {
		return nil
	}
	return &guardState{unsafe: clone(g.unsafe), cutIdx: slices.Clone(g.cutIdx), cutFrom: clone(g.cutFrom)}
}

// lineFour is Alg. 1 line 4: the least Σx without a violation, else the
// ample start.
func (in *Instance) lineFour() {
	if e, ok := in.minEntry(); ok {
		in.x = fitBudget(clone(e.X), in.cfg.MinCPU, in.cfg.Budget)
	} else {
		in.x = fitBudget(clone(in.x0), in.cfg.MinCPU, in.cfg.Budget)
	}
}

// RollbackDepth is how many safe allocations back a rollback goes for an
// overshoot r/R_SLO − 1: 1 (the most recent, §6's reading of line 4) up
// to an overshoot of step, one more per step beyond, at most max.
func RollbackDepth(overshoot, step float64, max int) int {
	if !(overshoot > 0) || !(step > 0) {
		return 1
	}
	d := 1 + int(math.Floor(overshoot/step))
	return min(d, max)
}

// blame marks the cut in force unsafe (the interval it governed broke
// the SLO) and forgets it.
func (in *Instance) blame() {
	g := in.g
	for _, i := range g.cutIdx {
		g.unsafe[i] = math.Max(g.unsafe[i], in.x[i])
	}
	g.cutIdx, g.cutFrom = nil, nil
}

// guardRollback answers a violation of r: the cut in force is blamed,
// and the allocation goes back RollbackDepth safe allocations (Degree)
// or to the least safe Σx (line 4).
func (in *Instance) guardRollback(r float64) {
	in.blame()
	gc := in.cfg.Guard
	if !gc.Degree {
		in.lineFour()
		return
	}
	depth := RollbackDepth(r/in.cfg.SLO-1, gc.DegreeStep, gc.MaxDepth)
	back := in.safePath()
	if len(back) == 0 {
		in.x = fitBudget(clone(in.x0), in.cfg.MinCPU, in.cfg.Budget)
		return
	}
	in.x = fitBudget(clone(back[min(depth, len(back))-1]), in.cfg.MinCPU, in.cfg.Budget)
}

// safePath is the distinct safe allocations with more CPU than the one
// in force, most recently used first: the path PEMA came down, read
// backwards.
func (in *Instance) safePath() [][]float64 {
	es := in.okEntries()
	cur := sum(in.x)
	seen := map[string]bool{}
	var out [][]float64
	for j := len(es) - 1; j >= 0; j-- {
		k := allocKey(es[j].X)
		if seen[k] || sum(es[j].X) <= cur*(1+1e-9) {
			continue
		}
		seen[k] = true
		out = append(out, es[j].X)
	}
	return out
}

// Violation is a violation seen inside an interval (the pema-guarded
// loop's sliding p95, §6's "higher resolution performance monitoring"):
// recorded in RHDb against the allocation in force and answered by a
// rollback at once, not at the interval's end. Without the guard the
// rollback is line 4's.
func (in *Instance) Violation(p95, rps float64) (Step, error) {
	if err := in.db.Append(Entry{T: in.t, X: clone(in.x), R: p95, RPS: rps, Uth: clone(in.uth),
		Hth: clone(in.hth), Violate: true}); err != nil {
		return Step{}, fmt.Errorf("pema: rhdb: %w", err)
	}
	in.rs = append(in.rs, p95)
	if len(in.rs) > in.cfg.K {
		in.rs = in.rs[len(in.rs)-in.cfg.K:]
	}
	st := Step{T: in.t, Violate: true, Kind: KindRollback}
	in.t++
	in.stall++
	if in.g != nil {
		in.guardRollback(p95)
	} else {
		in.lineFour()
	}
	st.X = clone(in.x)
	return st, nil
}

// undoRaised is mechanism 4's answer: each cut service that Escra's rule
// raised in more than RaiseShare of the interval's periods gets back the
// allocation it had before its last cut, which is marked unsafe.
func (in *Instance) undoRaised(raised []float64) []int {
	share := in.cfg.Guard.RaiseShare
	if share <= 0 || len(raised) != len(in.x) {
		return nil
	}
	var es []Entry
	var undone []int
	for i, r := range raised {
		if !(r > share) || in.x[i] >= in.x0[i]-1e-9 {
			continue
		}
		if es == nil {
			es, _ = in.db.Entries()
		}
		in.g.unsafe[i] = math.Max(in.g.unsafe[i], in.x[i])
		up := math.Min(in.x0[i], in.x[i]/(1-in.cfg.Beta))
		for j := len(es) - 1; j >= 0; j-- {
			if len(es[j].X) == len(in.x) && es[j].X[i] > in.x[i]*(1+1e-6) {
				up = es[j].X[i]
				break
			}
		}
		in.x[i] = up
		undone = append(undone, i)
	}
	if len(undone) > 0 {
		in.x = fitBudget(in.x, in.cfg.MinCPU, in.cfg.Budget)
	}
	return undone
}

// guardNext is service i's value after a cut by Δ from v, kept above
// what was marked unsafe: halfway to the mark, and no cut within 5 % of
// it. It returns v for no cut.
func (in *Instance) guardNext(i int, v, delta float64) float64 {
	nx := math.Max(in.cfg.MinCPU, v*(1-delta))
	if u := in.g.unsafe[i]; u > 0 && nx <= u*1.05 {
		if v <= u*1.1 {
			return v
		}
		nx = (v + u) / 2
	}
	return math.Min(nx, v)
}

// fitCuts is mechanism 3: up to n cuts of Δ among cand, each the one
// whose predicted latency per core saved is the smallest, none whose
// predicted p95 exceeds Margin × R. The prediction is anchored at r̄:
// the fit gives the change, the measurement the level.
func (in *Instance) fitCuts(cand []int, n int, delta, R float64) []int {
	es, _ := in.db.Entries()
	f, ok := FitRHDb(es, len(in.x), 3*in.cfg.SLO)
	if !ok {
		return nil
	}
	limit := in.cfg.Guard.Margin * R
	rbar := mean(in.rs)
	base := f.Predict(in.x)
	cur := clone(in.x)
	done := map[int]bool{}
	var cut []int
	for len(cut) < n {
		best, bestCost, bestX := -1, math.Inf(1), 0.0
		now := f.Predict(cur)
		for _, i := range cand {
			if done[i] {
				continue
			}
			for _, d := range []float64{delta, delta / 2} {
				nx := in.guardNext(i, cur[i], d)
				if nx >= cur[i]-1e-9 {
					break
				}
				v := cur[i]
				cur[i] = nx
				p := f.Predict(cur)
				cur[i] = v
				if rbar+p-base > limit {
					continue
				}
				if c := (p - now) / (v - nx); c < bestCost {
					best, bestCost, bestX = i, c, nx
				}
				break
			}
		}
		if best < 0 {
			break
		}
		cur[best] = bestX
		done[best] = true
		cut = append(cut, best)
	}
	slices.Sort(cut)
	for _, i := range cut {
		in.x[i] = cur[i]
	}
	return cut
}
