package mu

import (
	"math"
	"slices"
)

// MaxMin is the max-min fair split of capacity among demands on one
// resource (water-filling): M_f of Mu's Eq 7.
func MaxMin(capacity float64, demand []float64) []float64 {
	out := make([]float64, len(demand))
	idx := make([]int, len(demand))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case demand[a] < demand[b]:
			return -1
		case demand[a] > demand[b]:
			return 1
		}
		return 0
	})
	left := capacity
	for k, i := range idx {
		out[i] = min(demand[i], max(left, 0)/float64(len(idx)-k))
		left -= out[i]
	}
	return out
}

// Eq7 is Mu's Eq 7 at one instant for one resource: unfairness
// U = Σ_f |R_f − M_f| / |F| against the max-min split of capacity, and
// inefficiency I = |Σ_f d_f − Σ_f R_f| / |F| (unmet demand per function).
// Integrating over time is averaging these over the instants.
func Eq7(capacity float64, demand, alloc []float64) (u, ineff float64) {
	if len(demand) == 0 {
		return 0, 0
	}
	m := MaxMin(capacity, demand)
	var sd, sa float64
	for f := range demand {
		u += math.Abs(alloc[f] - m[f])
		sd += demand[f]
		sa += alloc[f]
	}
	n := float64(len(demand))
	return u / n, math.Abs(sd-sa) / n
}
