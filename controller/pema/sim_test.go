package pema

import (
	"math"
	"math/rand/v2"
	"testing"
)

// model is a stand-in app for the loop's behaviour (not a proof of the
// real system: the bench is): service i needs dᵢ·λ/λ₀ cores and adds
// wᵢ/(xᵢ − need) to the p95, M/M/1-like, with noise.
type model struct {
	d, w []float64
	base float64
	rng  *rand.Rand
}

func (m *model) p95(x []float64, lambda float64, noise bool) (float64, []float64, []float64) {
	r := m.base
	u := make([]float64, len(x))
	h := make([]float64, len(x))
	for i := range x {
		need := m.d[i] * lambda / 100
		u[i] = math.Min(1, need/x[i])
		if x[i] <= need*1.02 {
			r += 1 // saturated
			h[i] = 0.5
			continue
		}
		r += m.w[i] / (x[i] - need)
		if u[i] > 0.8 {
			h[i] = (u[i] - 0.8)
		}
	}
	if noise {
		r *= 1 + 0.05*m.rng.NormFloat64()
	}
	return r, u, h
}

// optm is PEMA's OPTM on the noise-free model: take 0.01 core from
// each service in turn while the SLO holds; stop when no cut holds.
func (m *model) optm(x0 []float64, lambda, slo float64) float64 {
	x := clone(x0)
	for changed := true; changed; {
		changed = false
		for i := range x {
			x[i] -= 0.01
			if r, _, _ := m.p95(x, lambda, false); x[i] < 0.05 || r > slo {
				x[i] += 0.01
			} else {
				changed = true
			}
		}
	}
	return sum(x)
}

func newModel(seed uint64) *model {
	return &model{d: []float64{0.10, 0.05, 0.08, 0.03, 0.06, 0.04}, w: []float64{0.002, 0.001, 0.002, 0.001, 0.0015, 0.001},
		base: 0.004, rng: rand.New(rand.NewPCG(seed, 3))}
}

// The loop at a fixed load (Fig 11's setting): PEMA ends within 1.3× of
// OPTM's total, below the ample start, with few violations, and every
// violation is followed by a rollback.
func TestConvergesOnModel(t *testing.T) {
	const slo, lambda = 0.050, 100.0
	var ratios []float64
	var viols []int
	for seed := range uint64(10) {
		m := newModel(seed)
		x0 := fill(6, 0.5)
		c := DefaultConfig(slo)
		c.Budget = 3
		in, _ := NewInstance(c, x0, nil, seed)
		x, viol := x0, 0
		for it := range 80 {
			r, u, h := m.p95(x, lambda, true)
			st, err := in.Step(Obs{P95: r, RPS: lambda, U: u, H: h})
			if err != nil {
				t.Fatal(err)
			}
			if r > slo {
				viol++
				if st.Kind != KindRollback {
					t.Fatalf("seed %d it %d: violation answered by %s", seed, it, st.Kind)
				}
			}
			x = st.X
		}
		// The allocation PEMA settles on is its best non-violating entry.
		best := math.Inf(1)
		es, _ := in.DB().Entries()
		for _, e := range es[len(es)-20:] {
			if !e.Violate {
				best = math.Min(best, sum(e.X))
			}
		}
		ratios = append(ratios, best/m.optm(x0, lambda, slo))
		viols = append(viols, viol)
		// Settling at the 0.95 buffer with 5 % noise on every p95 violates
		// ~16 % of intervals by itself; Alg. 1's plain rollback made
		// 11–59 of 80 (docs/pema.md, reading 4).
		if viol > 24 {
			t.Errorf("seed %d: %d violations in 80 intervals", seed, viol)
		}
	}
	tot := 0
	for _, v := range viols {
		tot += v
	}
	if tot > 160 { // 20 % over the ten seeds
		t.Errorf("%d violations in 800 intervals", tot)
	}
	if r := mean(ratios); r > 1.3 || r < 0.9 {
		t.Fatalf("PEMA/OPTM = %v (per seed %v)", r, ratios)
	}
	t.Logf("PEMA/OPTM per seed %v, violations in 80 %v", ratios, viols)
}

// Workload ranges: a stalled wide range is split; the child takes the
// lower half from the parent's allocation; the load picks the range;
// Eq 9's m is fitted while the allocation is held.
func TestRangesSplitAndSwitch(t *testing.T) {
	const slo = 0.050
	m := newModel(1)
	x0 := fill(6, 0.6)
	c := DefaultConfig(slo)
	c.Budget = 4
	mg, err := NewManager(c, RangeConfig{Bounds: []float64{0, 200}, TargetWidth: 50, SplitAfter: 3, LearnSteps: 4}, x0, nil, 5)
	if err != nil {
		t.Fatal(err)
	}
	x := x0
	lambdas := []float64{60, 100, 140, 180} // learning: allocation held
	for _, l := range lambdas {
		r, u, h := m.p95(x, l, false)
		st, _ := mg.Step(Obs{P95: r, RPS: l, U: u, H: h})
		if st.Kind != KindLearn || sum(st.X) != sum(x0) {
			t.Fatalf("learning step %+v", st)
		}
	}
	if mg.M() <= 0 {
		t.Fatalf("m = %v: latency grows with load on the model", mg.M())
	}
	for it := range 120 {
		l := 150.0 + 40*float64(it%2) // the upper half
		if it > 80 {
			l = 60
		}
		r, u, h := m.p95(x, l, true)
		st, err := mg.Step(Obs{P95: r, RPS: l, U: u, H: h})
		if err != nil {
			t.Fatal(err)
		}
		x = st.X
	}
	rs := mg.Ranges()
	if len(rs) < 2 {
		t.Fatalf("no split: %+v", rs)
	}
	child := rs[1]
	if child.Parent != 0 || child.Hi-child.Lo != 50 && child.Hi-child.Lo != 100 {
		t.Fatalf("first split %+v", child)
	}
	// The ranges still cover [0, 200) without overlap, none narrower than the target.
	var width float64
	for _, r := range rs {
		width += r.Hi - r.Lo
		if r.Hi-r.Lo < 50 {
			t.Fatalf("range [%v, %v) under the target width", r.Lo, r.Hi)
		}
	}
	if width != 200 {
		t.Fatalf("ranges cover %v rps of 200: %+v", width, rs)
	}
	if a := mg.Active(); a.Lo > 60 || a.Hi <= 60 {
		t.Fatalf("at 60 rps the acting range is [%v, %v)", a.Lo, a.Hi)
	}
	// The child started from its parent's allocation, so its history
	// begins with the parent's.
	pe, _ := rs[0].Inst.DB().Entries()
	ce, _ := child.Inst.DB().Entries()
	if len(ce) == 0 || len(pe) == 0 || ce[0].T != pe[0].T {
		t.Fatalf("child history %d entries, parent %d", len(ce), len(pe))
	}
}
