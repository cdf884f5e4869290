package pema

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Eqs 3/4/8/10/11 against hand-computed values.
func TestEquations(t *testing.T) {
	// R = 50 ms, r̄ = 30 ms, α = 0.5: s = 0.02/0.025 = 0.8.
	s := ScoreS(0.050, 0.030, 0.5)
	if !near(s, 0.8) {
		t.Fatalf("s = %v, want 0.8", s)
	}
	if n := NCut(6, s); n != 5 { // ⌈6·0.8⌉ = ⌈4.8⌉
		t.Fatalf("n = %d, want 5", n)
	}
	if n := NCut(5, s); n != 4 { // ⌈5·0.8⌉ = 4 exactly: no float rounding up to 5
		t.Fatalf("n = %d, want 4", n)
	}
	if d := DeltaCut(0.3, s); !near(d, 0.24) {
		t.Fatalf("Δ = %v, want 0.24", d)
	}
	if p := PExplore(0.1, 0.01, s); !near(p, 0.09) {
		t.Fatalf("p_e = %v, want 0.09", p)
	}
	// Far from the SLO s saturates at 1 (the min in Eq 3).
	if s := ScoreS(0.050, 0, 0.5); s != 1 {
		t.Fatalf("s = %v, want 1", s)
	}
	// Above the target s < 0: nothing to cut, exploration at its floor B.
	s = ScoreS(0.050, 0.060, 0.5)
	if !near(s, -0.4) || NCut(6, s) != 0 || DeltaCut(0.3, s) != 0 || PExplore(0.1, 0.01, s) != 0.01 {
		t.Fatalf("over target: s=%v n=%d Δ=%v p=%v", s, NCut(6, s), DeltaCut(0.3, s), PExplore(0.1, 0.01, s))
	}
	// Eq 9: m = 0.1 ms per rps, λ = 150 in a range topping at 200, SLO 50 ms → 45 ms.
	if r := Target(0.0001, 150, 200, 0.050); !near(r, 0.045) {
		t.Fatalf("R(λ) = %v, want 0.045", r)
	}
	if r := Target(0.0001, 150, math.Inf(1), 0.050); r != 0.050 {
		t.Fatalf("unbounded range: R(λ) = %v, want the SLO", r)
	}
	if m := Slope([]float64{1, 2, 3}, []float64{2, 4, 6}); !near(m, 2) {
		t.Fatalf("slope %v, want 2", m)
	}
	if m := Slope([]float64{5, 5, 5}, []float64{1, 2, 3}); m != 0 {
		t.Fatalf("slope with a constant load %v, want 0", m)
	}
}

// Eq 5: u* = u/Uᵗʰ = [0.25, 0.5, 0.5], min 0.25: p = [1, 2/3, 2/3].
func TestEq5(t *testing.T) {
	p := InclusionP([]float64{0.1, 0.2, 0.3}, []float64{0.4, 0.4, 0.6}, []int{0, 1, 2})
	if !near(p[0], 1) || !near(p[1], 2.0/3) || !near(p[2], 2.0/3) {
		t.Fatalf("p = %v", p)
	}
	// At its threshold a service gets 0 (§3.3: "u* = 1 will result in a zero probability").
	p = InclusionP([]float64{0.1, 0.4}, []float64{0.4, 0.4}, []int{0, 1})
	if !near(p[0], 1) || p[1] != 0 {
		t.Fatalf("p = %v", p)
	}
	// Every candidate above its threshold: the denominator is negative;
	// the least utilised keeps 1.
	p = InclusionP([]float64{0.3, 0.6}, []float64{0.15, 0.15}, []int{0, 1})
	if p[0] != 1 || p[1] != 0 {
		t.Fatalf("p = %v", p)
	}
}

func testCfg() Config {
	c := DefaultConfig(0.050)
	c.A, c.B = 0, 0 // no exploration unless a test wants it
	c.Buffer = 1
	c.K = 1
	return c
}

// With our reading (filter against the previous thresholds) a service
// that throttled in t−1 is not cut; with Alg. 1's line order (Eqs 6/7
// first) Hᵗʰ ≥ h already, so I = every service: the filter does nothing.
func TestFilterReading(t *testing.T) {
	o := Obs{P95: 0.001, RPS: 100, U: []float64{0, 0, 0}, H: []float64{0, 0.5, 0}}
	for _, first := range []bool{false, true} {
		c := testCfg()
		c.UpdateFirst = first
		in, err := NewInstance(c, []float64{1, 1, 1}, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		st, err := in.Step(o)
		if err != nil {
			t.Fatal(err)
		}
		cut1 := st.X[1] < 1
		if cut1 != first {
			t.Fatalf("update-first=%v: throttled service cut=%v (step %+v)", first, cut1, st)
		}
		// s = 1 (r ≪ R): n = N, Δ = β; the others lose 30 %.
		if st.Kind != KindCut || !near(st.X[0], 0.7) || !near(st.X[2], 0.7) {
			t.Fatalf("update-first=%v: %+v", first, st)
		}
		if u, h := in.Thresholds(); h[1] != 0.5 || u[0] != 0.15 {
			t.Fatalf("thresholds after Eqs 6/7: u=%v h=%v", u, h)
		}
	}
	// Utilisation: with update-first every u* ≤ 1 and a service at its
	// highest utilisation so far gets p = 0 from Eq 5 for ever after the
	// first step that measured it.
}

// Alg. 1 line 4: a violation rolls back to the non-violating entry with
// the least total CPU, not to the most recent one.
func TestRollbackToMinimum(t *testing.T) {
	c := testCfg()
	in, _ := NewInstance(c, []float64{1, 1}, nil, 2)
	ok := Obs{P95: 0.010, RPS: 100, U: []float64{0, 0}, H: []float64{0, 0}}
	st, _ := in.Step(ok) // entry T0: x=(1,1) ok; cut to (0.7,0.7)
	if !near(st.X[0], 0.7) {
		t.Fatalf("%+v", st)
	}
	st, _ = in.Step(ok) // T1: (0.7,0.7) ok; cut to (0.49,0.49)
	x2 := st.X
	st, _ = in.Step(Obs{P95: 0.060, RPS: 100, U: []float64{0, 0}, H: []float64{0, 0}}) // T2: x2 violates
	if st.Kind != KindRollback || !st.Violate || !near(st.X[0], 0.7) || !near(st.X[1], 0.7) {
		t.Fatalf("rollback to %v (x2 %v), want (0.7, 0.7): %+v", st.X, x2, st)
	}
	es, _ := in.DB().Entries()
	if len(es) != 3 || !es[2].Violate || es[1].Violate {
		t.Fatalf("rhdb %+v", es)
	}
}

// Exploration with p_e = 1 moves to some non-violating entry.
func TestExploration(t *testing.T) {
	c := testCfg()
	c.A, c.B = 0.5, 0.5
	in, _ := NewInstance(c, []float64{1, 1}, nil, 3)
	ok := Obs{P95: 0.010, RPS: 100, U: []float64{0, 0}, H: []float64{0, 0}}
	st, _ := in.Step(ok) // p_e = A·1 + B = 1, one entry: x0
	if st.Kind != KindExplore || !near(st.PE, 1) || st.X[0] != 1 {
		t.Fatalf("%+v", st)
	}
}

// Properties over random telemetry: Σx ≤ Ω at every step (also after Ω
// shrinks), every allocation ≥ the floor, a cut never raises a service,
// and every rollback lands on the minimum-Σ non-violating entry.
func TestProperties(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 1 + r.IntN(8)
		c := DefaultConfig(0.020 + r.Float64()*0.2)
		c.A, c.B = 0.1, 0.01
		c.Budget = 0.5 + r.Float64()*4
		x0 := make([]float64, n)
		for i := range x0 {
			x0[i] = 0.05 + r.Float64()*2
		}
		in, err := NewInstance(c, x0, nil, seed)
		if err != nil {
			t.Fatal(err)
		}
		for step := range 60 {
			if r.IntN(20) == 0 {
				c.Budget = 0.2 + r.Float64()*4
				in.SetBudget(c.Budget)
			}
			o := Obs{P95: r.Float64() * c.SLO * 1.5, RPS: r.Float64() * 500, U: make([]float64, n), H: make([]float64, n)}
			for i := range n {
				o.U[i], o.H[i] = r.Float64(), r.Float64()*r.Float64()
				if r.IntN(30) == 0 {
					o.U[i] = math.NaN()
				}
			}
			before := in.X()
			st, err := in.Step(o)
			if err != nil {
				t.Fatal(err)
			}
			floor := math.Min(c.MinCPU, c.Budget/float64(n))
			if s := sum(st.X); s > c.Budget*(1+1e-9) {
				t.Fatalf("seed %d step %d: Σx %v > Ω %v", seed, step, s, c.Budget)
			}
			for i, v := range st.X {
				if v < floor*(1-1e-9) {
					t.Fatalf("seed %d step %d: x[%d]=%v under the floor %v", seed, step, i, v, floor)
				}
				if st.Kind == KindCut && v > before[i]+1e-12 {
					t.Fatalf("seed %d step %d: cut raised x[%d] %v → %v", seed, step, i, before[i], v)
				}
			}
			if st.Kind == KindRollback {
				es, _ := in.DB().Entries()
				// Independently: per allocation, clean intervals minus
				// violations; bad allocations (but the start) condemn
				// every allocation they dominate.
				score := map[string]int{}
				for _, b := range es {
					if b.Violate || b.R > c.SLO {
						score[allocKey(b.X)]--
					} else {
						score[allocKey(b.X)]++
					}
				}
				best := math.Inf(1)
				for _, e := range es {
					ok := !e.Violate && e.R <= c.SLO && score[allocKey(e.X)] > 0
					for _, b := range es {
						if score[allocKey(b.X)] > 0 || allocKey(b.X) == allocKey(x0) {
							continue
						}
						le := true
						for i := range e.X {
							le = le && e.X[i] <= b.X[i]+1e-9
						}
						ok = ok && !le
					}
					if ok {
						best = math.Min(best, sum(fitBudget(clone(e.X), c.MinCPU, c.Budget)))
					}
				}
				if math.IsInf(best, 1) {
					best = sum(fitBudget(clone(x0), c.MinCPU, c.Budget))
				}
				if math.Abs(sum(st.X)-best) > 1e-9 {
					t.Fatalf("seed %d step %d: rollback Σx %v, least non-violating %v", seed, step, sum(st.X), best)
				}
				if !st.Violate {
					t.Fatal("rollback without a violation")
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := NewInstance(DefaultConfig(0), []float64{1}, nil, 0); err == nil {
		t.Fatal("slo 0 accepted")
	}
	if _, err := NewInstance(DefaultConfig(0.05), []float64{1, math.NaN()}, nil, 0); err == nil {
		t.Fatal("NaN allocation accepted")
	}
	c := DefaultConfig(0.05)
	c.A, c.B = 0.1, 0.2
	if c.Validate() == nil {
		t.Fatal("B > A accepted")
	}
	in, _ := NewInstance(DefaultConfig(0.05), []float64{1}, nil, 0)
	if _, err := in.Step(Obs{P95: 0.01, U: []float64{0, 0}, H: []float64{0}}); err == nil {
		t.Fatal("wrong service count accepted")
	}
	if _, err := in.Step(Obs{P95: math.NaN(), U: []float64{0}, H: []float64{0}}); err == nil {
		t.Fatal("NaN latency accepted")
	}
}

// A log-backed RHDb reloads what it wrote.
func TestLogDB(t *testing.T) {
	l := &memLog{}
	d, err := NewLogDB(l)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Append(Entry{T: 0, X: []float64{1, 2}, R: 0.01})
	_ = d.Append(Entry{T: 1, X: []float64{0.5, 2}, R: 0.09, Violate: true})
	d2, err := NewLogDB(l)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := d2.Entries()
	if len(es) != 2 || es[1].X[0] != 0.5 || !es[1].Violate {
		t.Fatalf("reloaded %+v", es)
	}
	l.b = append(l.b, []byte("{"))
	if _, err := NewLogDB(l); err == nil {
		t.Fatal("corrupt entry accepted")
	}
}

type memLog struct{ b [][]byte }

func (m *memLog) Append(v []byte) error  { m.b = append(m.b, append([]byte(nil), v...)); return nil }
func (m *memLog) All() ([][]byte, error) { return m.b, nil }

// After the SLO is tightened (Fig 20) history is judged against the new
// SLO: the rollback goes to an allocation that met it.
func TestSLOChangeRollsBackFurther(t *testing.T) {
	c := testCfg()
	in, _ := NewInstance(c, []float64{1, 1}, nil, 2)
	z := []float64{0, 0}
	in.Step(Obs{P95: 0.010, U: z, H: z}) // x0 gave 10 ms
	in.Step(Obs{P95: 0.030, U: z, H: z}) // (0.7, 0.7) gave 30 ms
	if err := in.SetSLO(0.020); err != nil {
		t.Fatal(err)
	}
	st, _ := in.Step(Obs{P95: 0.040, U: z, H: z})
	if st.Kind != KindRollback || st.X[0] != 1 {
		t.Fatalf("rollback to %v, want x0 (the only entry under the new 20 ms): %+v", st.X, st)
	}
}
