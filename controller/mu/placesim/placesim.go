// Package placesim is Mu §3.5.3's placement experiment: random
// clusters of 40 nodes and 300 functions whose demand exceeds them (CPU
// capacity 80 % of the demand, memory 60 %), placed by the Kubernetes
// default and by DRF with Alignment, WorstFit and BestFit node selection
// (controller/placement), scored by unfairness and inefficiency (Eq 7).
package placesim

import (
	"fmt"
	"math/rand"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

const mib = int64(1) << 20

// Algorithms compared, in the keys' spelling.
var Algorithms = []string{"default", "drf_alignment", "drf_worstfit", "drf_bestfit"}

// Config is one experiment.
type Config struct {
	Nodes, Functions, Cases int
	Seed                    int64
}

// Paper is §3.5.3's configuration.
func Paper() Config { return Config{Nodes: 40, Functions: 300, Cases: 500, Seed: 3} }

// Metrics are Eq 7 for one algorithm, averaged over the cases: CPU in
// cores, memory in MiB, per function.
type Metrics struct {
	UnfairCPU, UnfairMem float64 // U_j
	IneffCPU, IneffMem   float64 // I_j: unmet demand
	PodsPlaced           float64
}

type fn struct {
	cpu  float64
	mem  int64
	pods int
}

// genCase draws one test case: 90 % of functions need under 400 MB, 10 %
// 500–2,000 MB; 1–8 cores; 1–16 pods; nodes share the capacity with
// weights uniform in [0.5, 1.5), drawn apart for CPU and memory.
func genCase(rng *rand.Rand, nNodes, nFns int) ([]fn, []*placement.Node) {
	fs := make([]fn, nFns)
	var dCPU, dMem float64
	for i := range fs {
		m := 32 + rng.Int63n(400-32)
		if rng.Float64() < 0.1 {
			m = 500 + rng.Int63n(1501)
		}
		fs[i] = fn{cpu: float64(1 + rng.Intn(8)), mem: m * mib, pods: 1 + rng.Intn(16)}
		dCPU += fs[i].cpu * float64(fs[i].pods)
		dMem += float64(fs[i].mem) * float64(fs[i].pods)
	}
	wc, wm := make([]float64, nNodes), make([]float64, nNodes)
	var sc, sm float64
	for i := range wc {
		wc[i], wm[i] = 0.5+rng.Float64(), 0.5+rng.Float64()
		sc += wc[i]
		sm += wm[i]
	}
	nodes := make([]*placement.Node, nNodes)
	for i := range nodes {
		c := 0.8 * dCPU * wc[i] / sc
		m := int64(0.6 * dMem * wm[i] / sm)
		nodes[i] = &placement.Node{Name: fmt.Sprintf("n%02d", i), Index: i, CPUCap: c, CPUFree: c, MemCap: m, MemFree: m}
	}
	return fs, nodes
}

// MaxMin is mu.MaxMin (kept here for the simulator's callers).
func MaxMin(capacity float64, demand []float64) []float64 { return mu.MaxMin(capacity, demand) }

func eq7(capacity float64, demand, alloc []float64) (float64, float64) {
	return mu.Eq7(capacity, demand, alloc)
}

// Run places every case with every algorithm and averages Eq 7.
func Run(cfg Config) (map[string]Metrics, error) {
	if cfg.Nodes <= 0 || cfg.Functions <= 0 || cfg.Cases <= 0 {
		return nil, fmt.Errorf("placesim: nodes, functions and cases must be positive (got %d, %d, %d)", cfg.Nodes, cfg.Functions, cfg.Cases)
	}
	out := map[string]Metrics{}
	rng := rand.New(rand.NewSource(cfg.Seed))
	for c := 0; c < cfg.Cases; c++ {
		fs, proto := genCase(rng, cfg.Nodes, cfg.Functions)
		var capCPU, capMem float64
		for _, n := range proto {
			capCPU += n.CPUCap
			capMem += float64(n.MemCap)
		}
		for _, alg := range Algorithms {
			nodes := make([]*placement.Node, len(proto))
			for i, n := range proto {
				cp := *n
				nodes[i] = &cp
			}
			ds := make([]*placement.Demand, len(fs))
			for i, f := range fs {
				ds[i] = &placement.Demand{App: fmt.Sprintf("f%03d", i), CPU: f.cpu, Memory: f.mem, Pods: f.pods}
			}
			var placed []placement.Placement
			if alg == "default" {
				p, _ := placement.MuProfile("default")
				placed = placement.PlaceFIFO(p, ds, nodes)
			} else {
				p, err := placement.MuProfile(alg[len("drf_"):])
				if err != nil {
					return nil, err
				}
				placed = placement.PlaceDRF(p, ds, nodes)
			}
			dc, dm := make([]float64, len(ds)), make([]float64, len(ds))
			ac, am := make([]float64, len(ds)), make([]float64, len(ds))
			for i, d := range ds {
				dc[i] = d.CPU * float64(d.Pods)
				dm[i] = float64(d.Memory) * float64(d.Pods) / float64(mib)
				ac[i] = d.AllocCPU
				am[i] = float64(d.AllocMem) / float64(mib)
			}
			uc, ic := eq7(capCPU, dc, ac)
			um, im := eq7(capMem/float64(mib), dm, am)
			m := out[alg]
			k := float64(cfg.Cases)
			m.UnfairCPU += uc / k
			m.UnfairMem += um / k
			m.IneffCPU += ic / k
			m.IneffMem += im / k
			m.PodsPlaced += float64(len(placed)) / k
			out[alg] = m
		}
	}
	return out, nil
}
