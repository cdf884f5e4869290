package placement

import (
	"errors"
	"math/rand"
	"strings"
	"testing"
)

func nodes(spec ...float64) []*Node {
	var out []*Node
	for i, c := range spec {
		out = append(out, &Node{Name: string(rune('a' + i)), Index: i, CPUCap: c, CPUFree: c,
			MemCap: 8 << 30, MemFree: 8 << 30, AppCount: map[string]int{}})
	}
	return out
}

// constScore scores a node by a table, to test the weighted sum alone.
type constScore map[string]float64

func (constScore) Name() string { return "const" }
func (t constScore) Score(_ *Cycle, _ *Request, n *Node) float64 {
	return t[n.Name]
}

func TestFiltersThenWeightedScores(t *testing.T) {
	ns := nodes(1, 4, 2)
	p := &Profile{Filters: []Filter{Resources{}}, Scorers: []Weighted{{LeastLoaded{}, 1}}}
	res, err := p.Schedule(&Request{Name: "x", CPU: 1.5}, ns)
	if err != nil {
		t.Fatal(err)
	}
	if res.Node.Name != "b" {
		t.Fatalf("least loaded picked %s, want b", res.Node.Name)
	}
	if why := res.Rejected["a"]; !strings.Contains(why, "Resources: 1.00 free cores, 1.50 asked") {
		t.Errorf("a's rejection: %q", why)
	}
	if len(res.Feasible) != 2 {
		t.Errorf("feasible %d, want 2", len(res.Feasible))
	}
	// A heavier second scorer overrides the first.
	p.Scorers = append(p.Scorers, Weighted{constScore{"c": 100}, 10})
	if res, _ := p.Schedule(&Request{Name: "x", CPU: 1.5}, ns); res.Node.Name != "c" {
		t.Errorf("weighted sum picked %s, want c", res.Node.Name)
	}
}

func TestScoresAreClampedToMaxScore(t *testing.T) {
	ns := nodes(1, 1)
	p := &Profile{Scorers: []Weighted{{constScore{"a": 1e6, "b": 100}, 1}, {constScore{"b": 1}, 1}}}
	res, err := p.Schedule(&Request{Name: "x"}, ns)
	if err != nil {
		t.Fatal(err)
	}
	if res.Node.Name != "b" {
		t.Errorf("a plugin beyond MaxScore outweighed the others: picked %s", res.Node.Name)
	}
}

func TestFitErrorListsEveryHost(t *testing.T) {
	ns := nodes(1, 1)
	_, err := Deployer().Schedule(&Request{Name: "big", CPU: 2}, ns)
	var fe *FitError
	if !errors.As(err, &fe) {
		t.Fatalf("want a FitError, got %v", err)
	}
	for _, want := range []string{"container big", "a: Resources", "b: Resources"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if _, err := Deployer().Schedule(&Request{Name: "p", Host: "b", CPU: 0.5}, ns); err != nil {
		t.Errorf("pinned request: %v", err)
	}
	res, _ := Deployer().Schedule(&Request{Name: "p", Host: "b", CPU: 0.5}, ns)
	if res.Node.Name != "b" || !strings.Contains(res.Rejected["a"], "pinned to b") {
		t.Errorf("pinned request went to %s, rejections %v", res.Node.Name, res.Rejected)
	}
}

// The deployer spreads an app before it balances load, and a batch sees its
// own earlier placements through Assume.
func TestDeployerSpreadsThenBalances(t *testing.T) {
	ns := nodes(4, 1, 2)
	p := Deployer()
	var got []string
	for i := 0; i < 5; i++ {
		r := &Request{Name: "w", App: "app", CPU: 0.25, Memory: 1 << 20}
		res, err := p.Schedule(r, ns)
		if err != nil {
			t.Fatal(err)
		}
		Assume(r, res.Node)
		got = append(got, res.Node.Name)
	}
	// Each host once before any twice (spread), least loaded first within
	// a round: a (3.75 of 4 free after it), c (1.75 of 2), b; then a, and
	// c before b again.
	if strings.Join(got, "") != "acbac" {
		t.Errorf("order %v, want a c b a c", got)
	}
	counts := map[string]int{}
	for _, g := range got {
		counts[g]++
	}
	if counts["a"] != 2 || counts["b"] != 1 || counts["c"] != 2 {
		t.Errorf("counts %v, want a:2 b:1 c:2", counts)
	}
	if ns[0].CPUFree != 3.5 || ns[0].AppCount["app"] != 2 || ns[0].Containers != 2 {
		t.Errorf("assume did not book: %+v", ns[0])
	}
	r := &Request{App: "app", CPU: 0.25, Memory: 1 << 20}
	Forget(r, ns[0])
	if ns[0].CPUFree != 3.75 || ns[0].AppCount["app"] != 1 {
		t.Errorf("forget did not undo: %+v", ns[0])
	}
}

// Ties go to the first host without a Rand, and spread over all tied hosts
// with one.
func TestTieBreak(t *testing.T) {
	ns := nodes(1, 1, 1)
	p := &Profile{}
	for i := 0; i < 10; i++ {
		if res, _ := p.Schedule(&Request{}, ns); res.Node.Name != "a" {
			t.Fatalf("deterministic tie went to %s", res.Node.Name)
		}
	}
	p.Rand = rand.New(rand.NewSource(1))
	seen := map[string]int{}
	for i := 0; i < 3000; i++ {
		res, _ := p.Schedule(&Request{}, ns)
		seen[res.Node.Name]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if seen[n] < 800 || seen[n] > 1200 {
			t.Errorf("random ties are not uniform: %v", seen)
		}
	}
}

func TestCycleScratch(t *testing.T) {
	c := &Cycle{}
	if _, ok := c.Read("k"); ok {
		t.Fatal("empty cycle has a value")
	}
	c.Write("k", 3)
	if v, ok := c.Read("k"); !ok || v.(int) != 3 {
		t.Fatalf("read %v %v", v, ok)
	}
}
