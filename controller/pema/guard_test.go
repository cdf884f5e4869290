package pema

import (
	"testing"
)

func guardCfg(degree, fit bool) Config {
	c := testCfg()
	g := DefaultGuard()
	g.Degree, g.Fit, g.RaiseShare = degree, fit, 0
	c.Guard = &g
	return c
}

// The degree rule (PEMA §6): one safe allocation back up to an overshoot
// of one DegreeStep, one more per step beyond, capped.
func TestRollbackDepth(t *testing.T) {
	for _, tc := range []struct {
		over float64
		want int
	}{{0.01, 1}, {0.49, 1}, {0.5, 2}, {1.2, 3}, {2.6, 6}, {50, 8}, {-0.1, 1}} {
		if got := RollbackDepth(tc.over, 0.5, 8); got != tc.want {
			t.Errorf("RollbackDepth(%v) = %d, want %d", tc.over, got, tc.want)
		}
	}
}

// A violation 10 % over the SLO goes back to the allocation before the
// cut; one 3× over it goes further back on the path PEMA came down,
// to more CPU. Both instances saw the same history.
func TestDegreeRollsBackFurtherForLargerOvershoot(t *testing.T) {
	ok := Obs{P95: 0.010, RPS: 100, U: []float64{0.1, 0.1, 0.1}, H: []float64{0, 0, 0}}
	walk := func() (*Instance, [][]float64) {
		in, err := NewInstance(guardCfg(true, false), []float64{1, 1, 1}, nil, 7)
		if err != nil {
			t.Fatal(err)
		}
		path := [][]float64{in.X()}
		for range 5 {
			st, err := in.Step(ok)
			if err != nil || st.Kind != KindCut {
				t.Fatalf("step %+v, %v: want a cut", st, err)
			}
			path = append(path, st.X)
		}
		return in, path
	}
	small, path := walk()
	large, _ := walk()
	slo := small.cfg.SLO
	s1, err := small.Step(Obs{P95: 1.1 * slo, RPS: 100, U: ok.U, H: ok.H})
	if err != nil {
		t.Fatal(err)
	}
	s3, err := large.Step(Obs{P95: 3 * slo, RPS: 100, U: ok.U, H: ok.H})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Kind != KindRollback || s3.Kind != KindRollback {
		t.Fatalf("kinds %s, %s: want rollbacks", s1.Kind, s3.Kind)
	}
	// path[5] violated; 10 % over: path[4], the allocation before the cut.
	if !equal(s1.X, path[4]) {
		t.Fatalf("10 %% over: rolled back to %v, want %v (path %v)", s1.X, path[4], path)
	}
	// 200 % over: depth 1 + ⌊2/0.5⌋ = 5 → path[0], the ample start.
	if !equal(s3.X, path[0]) || !(sum(s3.X) > sum(s1.X)) {
		t.Fatalf("3× over: rolled back to %v (Σ %.3f), want %v, more than %v", s3.X, sum(s3.X), path[0], s1.X)
	}
	// The same violation inside an interval goes back as far.
	mid, _ := walk()
	sv, err := mid.Violation(3*slo, 100)
	if err != nil || !equal(sv.X, path[0]) {
		t.Fatalf("Violation: %v, %v; want %v", sv.X, err, path[0])
	}
}

// The cut that broke the SLO is marked unsafe for its range: PEMA does
// not cut that service to that value again, only halfway towards it.
func TestBlamedCutIsNotRepeated(t *testing.T) {
	ok := Obs{P95: 0.010, RPS: 100, U: []float64{0.1, 0.1}, H: []float64{0, 0}}
	in, _ := NewInstance(guardCfg(true, false), []float64{1, 1}, nil, 3)
	st, _ := in.Step(ok) // (1, 1) → (0.7, 0.7)
	bad := st.X
	if st, _ = in.Step(Obs{P95: 0.2, RPS: 100, U: ok.U, H: ok.H}); st.Kind != KindRollback {
		t.Fatalf("%+v: want a rollback", st)
	}
	st, _ = in.Step(ok) // from (1, 1) again: not to 0.7, halfway
	for i := range st.X {
		if st.X[i] <= bad[i]+1e-9 {
			t.Fatalf("service %d cut to %v again (unsafe %v): %+v", i, st.X[i], bad[i], st)
		}
	}
	if !near(st.X[0], 0.85) {
		t.Fatalf("cut to %v, want halfway 0.85", st.X)
	}
}

// Escra's rule raising a cut service in more than RaiseShare of the
// periods undoes its last cut and marks it.
func TestRaisedServiceIsUncut(t *testing.T) {
	c := guardCfg(true, false)
	c.Guard.RaiseShare = 0.3
	in, _ := NewInstance(c, []float64{1, 1}, nil, 3)
	ok := Obs{P95: 0.010, RPS: 100, U: []float64{0.1, 0.1}, H: []float64{0, 0}}
	in.Step(ok)          // → (0.7, 0.7)
	st, _ := in.Step(ok) // → (0.49, 0.49)
	st, _ = in.Step(Obs{P95: 0.010, RPS: 100, U: ok.U, H: ok.H, Raised: []float64{0.5, 0.1}})
	if st.Kind != KindUndo || !near(st.X[0], 0.7) || !near(st.X[1], 0.49) {
		t.Fatalf("%+v: want service 0 back at 0.7, service 1 kept", st)
	}
	if !near(in.g.unsafe[0], 0.49) || in.g.unsafe[1] != 0 {
		t.Fatalf("unsafe %v: want 0.49 for service 0", in.g.unsafe)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}
