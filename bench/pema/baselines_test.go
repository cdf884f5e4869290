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
