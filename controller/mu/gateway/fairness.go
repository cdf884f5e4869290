package gateway

import (
	"context"

	"github.com/escra-dev/escra/controller/mu"
)

// fairness computes Eq 7 (Mu §3.5.1) for CPU over the functions
// that want replicas, against the cluster's cores.
func (g *Gateway) fairness(ctx context.Context, want map[string]int) {
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return
	}
	var capCPU float64
	for _, n := range nodes {
		capCPU += n.CPUCap
	}
	var demand, alloc []float64
	for _, name := range g.order {
		st := g.fns[name]
		if want[name] == 0 {
			continue
		}
		st.mu.Lock()
		ready := len(st.ready)
		st.mu.Unlock()
		demand = append(demand, float64(want[name])*st.spec.CPUCores)
		alloc = append(alloc, float64(ready)*st.spec.CPUCores)
	}
	if len(demand) == 0 {
		return
	}
	u, i := mu.Eq7(capCPU, demand, alloc)
	g.fairMu.Lock()
	g.uNow, g.iNow = u, i
	g.uSum += u
	g.iSum += i
	g.fairN++
	g.fairMu.Unlock()
}

// Fairness returns Eq 7's unfairness and inefficiency (CPU cores per
// function) of the last epoch and averaged over the epochs so far.
func (g *Gateway) Fairness() (uNow, iNow, uAvg, iAvg float64) {
	g.fairMu.Lock()
	defer g.fairMu.Unlock()
	if g.fairN > 0 {
		uAvg, iAvg = g.uSum/g.fairN, g.iSum/g.fairN
	}
	return g.uNow, g.iNow, uAvg, iAvg
}

// ResetFairness starts Eq 7's averages afresh, so that a benchmark's
// unmeasured warm-up does not count in them (Eq 7 sums over the measured
// instants T).
func (g *Gateway) ResetFairness() {
	g.fairMu.Lock()
	g.uSum, g.iSum, g.fairN = 0, 0, 0
	g.fairMu.Unlock()
}
