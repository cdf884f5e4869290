package gateway

import (
	"context"
	"math"
	"testing"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

// Eq 7 on the real allocation: one 1-core node, two functions asking 4
// replicas of 0.5 cores each; one has 2 ready, the other none. Max-min
// gives each 0.5 cores: U = (|1−0.5| + |0−0.5|)/2 = 0.5; unmet demand
// I = |4 − 1|/2 = 1.5.
func TestFairnessOfRealAllocation(t *testing.T) {
	sc := &procScaler{ceiling: 4, nodes: []*placement.Node{{Name: "n", CPUCap: 1}}}
	a, b := testFn(mu.ASMu), testFn(mu.ASMu)
	b.Name = "other"
	g, err := New([]Function{a, b}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	st.ready["r1"], st.ready["r2"] = Replica{}, Replica{}
	g.fairness(context.Background(), map[string]int{"hello": 4, "other": 4})
	u, i, ua, ia := g.Fairness()
	if math.Abs(u-0.5) > 1e-9 || math.Abs(i-1.5) > 1e-9 || ua != u || ia != i {
		t.Fatalf("U %.3f I %.3f (avg %.3f %.3f), want 0.5 and 1.5", u, i, ua, ia)
	}
	// After a reset only later epochs count: each function now has 1 of
	// 4, its max-min share: U = 0, I = |4 − 1|/2 = 1.5.
	g.ResetFairness()
	if _, _, ua, ia := g.Fairness(); ua != 0 || ia != 0 {
		t.Fatalf("averages %.3f %.3f right after a reset, want none", ua, ia)
	}
	delete(st.ready, "r2")
	g.fns["other"].ready["o1"] = Replica{}
	g.fairness(context.Background(), map[string]int{"hello": 4, "other": 4})
	if _, _, ua, ia := g.Fairness(); math.Abs(ua) > 1e-9 || math.Abs(ia-1.5) > 1e-9 {
		t.Fatalf("averages after the reset %.3f %.3f, want 0 and 1.5 (the epoch before the reset counted)", ua, ia)
	}
}
