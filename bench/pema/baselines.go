package pema

import (
	"math"
	"sort"
)

// RuleFactor and RuleQuantile are PEMA §5's reading of the Kubernetes
// rule: the 90th percentile of recent usage with 15 % over-provisioning.
const (
	RuleFactor   = 1.15
	RuleQuantile = 0.90
)

// Rule is RULE's limit for one container from its recent usage samples
// (cores), never below floor.
func Rule(usage []float64, floor float64) float64 {
	if len(usage) == 0 {
		return floor
	}
	s := append([]float64(nil), usage...)
	sort.Float64s(s)
	i := int(math.Ceil(RuleQuantile*float64(len(s)))) - 1
	return math.Max(floor, RuleFactor*s[max(0, i)])
}

// OPTM is PEMA §4.2's offline search: from x, take step cores from
// each service in turn, keep the cut while holds(x) (the SLO held over
// repeated runs), and stop when no single cut holds. Our only change:
// the step starts coarse (start) and halves down to step, so the search
// fits the bench's time; the stopping rule is the paper's at the finest
// step. trials bounds the number of holds calls.
func OPTM(x []float64, start, step, floor float64, trials int, holds func([]float64) bool) (best []float64, used int) {
	best, used, _ = OPTMPath(x, start, step, floor, trials, holds)
	return best, used
}

// OPTMPath is OPTM that also returns its path: the start and every
// allocation it kept, in order (each cuts one service of the one before).
func OPTMPath(x []float64, start, step, floor float64, trials int, holds func([]float64) bool) (best []float64, used int, path [][]float64) {
	x = append([]float64(nil), x...)
	path = [][]float64{append([]float64(nil), x...)}
	for d := start; d >= step-1e-12 && used < trials; d /= 2 {
		for changed := true; changed && used < trials; {
			changed = false
			for i := range x {
				if x[i]-d < floor-1e-12 || used >= trials {
					continue
				}
				x[i] -= d
				used++
				if holds(x) {
					changed = true
					path = append(path, append([]float64(nil), x...))
				} else {
					x[i] += d
				}
			}
		}
		if d/2 < step-1e-12 {
			break
		}
	}
	return x, used, path
}

// Settle is OPTM's answer to "satisfies the SLO" (PEMA §4.2) when one
// trial is too short to say it: the last allocation on OPTM's path that
// holds (holds: a longer run's verdict), found by bisection (the path
// only cuts, so a later entry holds no more often than an earlier one).
// path[0], the ample start, is taken to hold (PEMA §3.1). checks counts
// the holds calls.
func Settle(path [][]float64, holds func([]float64) bool) (x []float64, at, checks int) {
	lo, hi := 0, len(path)-1 // path[lo] holds; entries after hi do not
	for lo < hi {
		m := (lo + hi + 1) / 2
		checks++
		if holds(path[m]) {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return append([]float64(nil), path[lo]...), lo, checks
}

// HPATolerance is the Kubernetes horizontal pod autoscaler's default
// tolerance: no change while the usage-to-target ratio is within 10 %.
const HPATolerance = 0.1

// HPA is PEMA §4.2's RULE, "Kubernetes' rule-based resource scaling"
// (the horizontal pod autoscaler), applied to one container's CPU limit:
// the HPA's desired = current × (utilisation / target), where
// utilisation = used / limit, so the new limit is used / target, unless
// the ratio is within HPATolerance of 1 (the limit is kept). used is the
// recent mean usage (cores); the result is never below floor. PEMA does
// not state its target; §5 says a rule's thresholds need "deep
// application knowledge", and TuneTarget is how the bench sets it.
func HPA(limit, used, target, floor float64) float64 {
	if !(target > 0) || !(limit > 0) {
		return math.Max(floor, limit)
	}
	ratio := used / limit / target
	if math.Abs(ratio-1) <= HPATolerance {
		return math.Max(floor, limit)
	}
	return math.Max(floor, used/target)
}

// TuneTarget is an operator's setting of HPA's target for an app and
// SLO: the highest of targets whose trial run holds the SLO (holds
// reports it), trying them from the highest down; ok is false when none
// holds (target is then the lowest).
func TuneTarget(targets []float64, holds func(target float64) bool) (target float64, ok bool) {
	t := append([]float64(nil), targets...)
	sort.Sort(sort.Reverse(sort.Float64Slice(t)))
	for _, u := range t {
		if holds(u) {
			return u, true
		}
	}
	if len(t) == 0 {
		return 0, false
	}
	return t[len(t)-1], false
}

// HPARule is RULE over time: HPA per container every interval, with the
// HPA's scale-down stabilisation (a cut goes only as low as the highest
// recommendation of the last Window intervals; Kubernetes' 5 minutes
// are 2.5 of PEMA's 2-minute intervals, so 3). A raise applies at once.
type HPARule struct {
	Target, Floor float64
	Window        int
	recs          [][]float64
}

// Next is the limits for the next interval from the current ones (x)
// and each container's mean usage over the last interval (cores).
func (h *HPARule) Next(x, used []float64) []float64 {
	rec := make([]float64, len(x))
	for j := range x {
		rec[j] = HPA(x[j], used[j], h.Target, h.Floor)
	}
	h.recs = append(h.recs, rec)
	if w := max(1, h.Window); len(h.recs) > w {
		h.recs = h.recs[len(h.recs)-w:]
	}
	out := make([]float64, len(x))
	for j := range x {
		if rec[j] >= x[j] {
			out[j] = rec[j]
			continue
		}
		hi := 0.0
		for _, r := range h.recs {
			hi = math.Max(hi, r[j])
		}
		out[j] = math.Min(x[j], hi)
	}
	return out
}
