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
	x = append([]float64(nil), x...)
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
				} else {
					x[i] += d
				}
			}
		}
		if d/2 < step-1e-12 {
			break
		}
	}
	return x, used
}
