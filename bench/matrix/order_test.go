package matrix

import (
	"slices"
	"testing"
)

// The policies' order is a permutation fixed by the order seed; another
// order seed gives other orders, so runs pooled from different seeds do
// not put the same policy after the same neighbour every time.
func TestPolicyOrder(t *testing.T) {
	ps := []string{"static15", "autopilot", "escra-paper", "escra", "static15+batch", "escra+batch"}
	sorted := slices.Sorted(slices.Values(ps))
	differs := 0
	for rep := range 3 {
		for cell := range 6 {
			a := PolicyOrder(ps, 1, rep, cell)
			if !slices.Equal(slices.Sorted(slices.Values(a)), sorted) {
				t.Fatalf("rep %d cell %d: %v is not a permutation of %v", rep, cell, a, ps)
			}
			if !slices.Equal(a, PolicyOrder(ps, 1, rep, cell)) {
				t.Fatalf("rep %d cell %d: the same order seed gave two orders", rep, cell)
			}
			if !slices.Equal(a, PolicyOrder(ps, 2, rep, cell)) {
				differs++
			}
		}
	}
	if differs < 9 {
		t.Fatalf("order seeds 1 and 2 gave the same order in %d of 18 cells", 18-differs)
	}
	if !slices.Equal(ps, []string{"static15", "autopilot", "escra-paper", "escra", "static15+batch", "escra+batch"}) {
		t.Fatalf("PolicyOrder changed its input: %v", ps)
	}
}
