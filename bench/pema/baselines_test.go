package pema

import (
	"math"
	"testing"
)

func TestRule(t *testing.T) {
	// p90 of 1..10 (nearest rank) is 9: 1.15 × 0.09 cores.
	u := []float64{0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10}
	if r := Rule(u, 0.05); math.Abs(r-1.15*0.09) > 1e-12 {
		t.Fatalf("rule %v", r)
	}
	if r := Rule([]float64{0.001}, 0.05); r != 0.05 {
		t.Fatalf("floor: %v", r)
	}
	if r := Rule(nil, 0.05); r != 0.05 {
		t.Fatalf("no samples: %v", r)
	}
}

// On a model where service i needs need[i], OPTM ends with every service
// within one finest step of its need, and no single further cut holds.
func TestOPTM(t *testing.T) {
	need := []float64{0.12, 0.31, 0.05}
	holds := func(x []float64) bool {
		for i := range x {
			if x[i] < need[i] {
				return false
			}
		}
		return true
	}
	x, used := OPTM([]float64{1, 1, 1}, 0.1, 0.025, 0.05, 1000, holds)
	for i := range x {
		if x[i] < need[i] || x[i] >= need[i]+0.025+1e-9 && x[i]-0.025 >= 0.05 {
			t.Fatalf("x=%v need=%v", x, need)
		}
	}
	if used == 0 || used > 200 {
		t.Fatalf("%d trials", used)
	}
}

func TestHPA(t *testing.T) {
	// 0.2 cores used of a 0.5 limit at an 80 % target: 0.25.
	if l := HPA(0.5, 0.2, 0.8, 0.01); math.Abs(l-0.25) > 1e-12 {
		t.Fatalf("down: %v", l)
	}
	// Throttled at its limit, it grows by 1/target: 0.1 → 0.125.
	if l := HPA(0.1, 0.1, 0.8, 0.01); math.Abs(l-0.125) > 1e-12 {
		t.Fatalf("up: %v", l)
	}
	// Within the 10 % tolerance the limit stays.
	if l := HPA(0.25, 0.21, 0.8, 0.01); l != 0.25 {
		t.Fatalf("tolerance: %v", l)
	}
	if l := HPA(0.5, 0.001, 0.8, 0.01); l != 0.01 {
		t.Fatalf("floor: %v", l)
	}
}

func TestTuneTarget(t *testing.T) {
	var tried []float64
	u, ok := TuneTarget([]float64{0.5, 0.9, 0.7}, func(u float64) bool { tried = append(tried, u); return u <= 0.7 })
	if !ok || u != 0.7 || len(tried) != 2 || tried[0] != 0.9 {
		t.Fatalf("got %v %v, tried %v", u, ok, tried)
	}
	if u, ok := TuneTarget([]float64{0.5, 0.9}, func(float64) bool { return false }); ok || u != 0.5 {
		t.Fatalf("none holds: %v %v", u, ok)
	}
}

// A cut waits for the window's highest recommendation; a raise does not.
func TestHPARuleStabilises(t *testing.T) {
	h := &HPARule{Target: 0.5, Floor: 0.01, Window: 3}
	x := h.Next([]float64{1}, []float64{0.3}) // rec 0.6
	if math.Abs(x[0]-0.6) > 1e-12 {
		t.Fatalf("first cut: %v", x)
	}
	x = h.Next(x, []float64{0.1}) // rec 0.2, but 0.6 is in the window
	if math.Abs(x[0]-0.6) > 1e-12 {
		t.Fatalf("stabilised: %v", x)
	}
	x = h.Next(x, []float64{0.1})
	x = h.Next(x, []float64{0.1}) // 0.6 has left the window
	if math.Abs(x[0]-0.2) > 1e-12 {
		t.Fatalf("after the window: %v", x)
	}
	x = h.Next(x, []float64{0.2}) // at its limit: up by 1/target at once
	if math.Abs(x[0]-0.4) > 1e-12 {
		t.Fatalf("raise: %v", x)
	}
}

// Settle walks OPTM's path back to the last entry a longer verdict
// holds, in log2 checks.
func TestSettle(t *testing.T) {
	var path [][]float64
	for i := range 17 {
		path = append(path, []float64{1 - 0.05*float64(i)})
	}
	holds := func(x []float64) bool { return x[0] >= 0.6-1e-9 } // entries 0..8
	x, at, checks := Settle(path, holds)
	if at != 8 || math.Abs(x[0]-0.6) > 1e-9 || checks > 5 {
		t.Fatalf("at %d x %v after %d checks", at, x, checks)
	}
	if _, at, _ := Settle(path, func([]float64) bool { return false }); at != 0 {
		t.Fatalf("nothing holds: at %d, want the start", at)
	}
	_, _, p := OPTMPath([]float64{1, 1}, 0.5, 0.25, 0, 100, func(x []float64) bool { return x[0]+x[1] >= 1 })
	if len(p) < 2 || p[0][0] != 1 || p[0][1] != 1 {
		t.Fatalf("path %v", p)
	}
}
