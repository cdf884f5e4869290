package placement

import (
	"testing"

	"github.com/escra-dev/escra/internal/wysiwyg"
)

// §IV-D: a C1 container goes to the host where its simulated allocation
// has the most on P1 cores; a host where it cannot be WYSIWYG is dropped.
func TestWysiwygPlacement(t *testing.T) {
	frag := wysiwyg.NewHost(4, wysiwyg.Hard) // 3 fractions: one P3 core left
	for _, id := range []string{"a", "b", "c"} {
		if _, err := frag.Add(id, wysiwyg.C1, 600); err != nil {
			t.Fatal(err)
		}
	}
	half := wysiwyg.NewHost(4, wysiwyg.Hard) // a P2 core with 500m free
	if _, err := half.Add("x", wysiwyg.C1, 2500); err != nil {
		t.Fatal(err)
	}
	empty := wysiwyg.NewHost(4, wysiwyg.Hard)
	node := func(name string, h *wysiwyg.Host) *Node {
		free := float64(4000-h.Booked()) / 1000
		return &Node{Name: name, CPUCap: 4, CPUFree: free, MemCap: 1 << 30, MemFree: 1 << 30, Ext: map[string]any{WysiwygExt: h}}
	}
	nodes := []*Node{node("frag", frag), node("half", half), node("empty", empty)}
	p := WysiwygDeployer()
	// 2 whole cores: only "empty" can be WYSIWYG ("half" has 1 P3 core
	// and frac 0; "frag" has 1 P3 core).
	res, err := p.Schedule(&Request{Name: "two", CPU: 2, Labels: map[string]string{CPULabel: "wysiwyg"}}, nodes)
	if err != nil || res.Node.Name != "empty" {
		t.Fatalf("2 cores: %v %v", res.Node, err)
	}
	if _, ok := res.Rejected["half"]; !ok {
		t.Fatalf("half not rejected: %v", res.Rejected)
	}
	// 1 core: "frag" and "half" give it a P1 core as well as "empty";
	// all score MaxScore, so the deployer's own scores decide.
	res, err = p.Schedule(&Request{Name: "one", CPU: 1, Labels: map[string]string{CPULabel: "wysiwyg"}}, nodes)
	if err != nil || res.Feasible[0].Parts["WysiwygScore"] != res.Feasible[2].Parts["WysiwygScore"] {
		t.Fatalf("1 core: %+v %v", res.Feasible, err)
	}
	// A C2 request scores the same everywhere.
	res, err = p.Schedule(&Request{Name: "c2", CPU: 0.5}, nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Feasible {
		if f.Parts["WysiwygScore"] != MaxScore*10000 {
			t.Fatalf("C2 scored %v on %s", f.Parts, f.Node.Name)
		}
	}
}

// Answers from the hosts themselves (CpuPlacementQuery) rank like local
// simulations: less on shared cores wins; a principle-hard refusal drops
// the host.
func TestWysiwygAnswers(t *testing.T) {
	mk := func(name string, a WysiwygAnswer) *Node {
		return &Node{Name: name, CPUCap: 4, CPUFree: 4, MemCap: 1, MemFree: 1, Ext: map[string]any{WysiwygAnswerExt: a}}
	}
	nodes := []*Node{
		mk("shared", WysiwygAnswer{Alloc: wysiwyg.Alloc{R: 1500, P2: map[int]int64{0: 1000, 1: 500}}}),
		mk("refuses", WysiwygAnswer{Err: wysiwyg.ErrNotWYSIWYG}),
		mk("p1", WysiwygAnswer{Alloc: wysiwyg.Alloc{R: 1500, P1: wysiwyg.CPUSet{3}, P2: map[int]int64{2: 500}}}),
	}
	res, err := WysiwygDeployer().Schedule(&Request{Name: "x", CPU: 1.5, Labels: map[string]string{CPULabel: "wysiwyg"}}, nodes)
	if err != nil || res.Node.Name != "p1" {
		t.Fatalf("%v %v", res.Node, err)
	}
	if _, ok := res.Rejected["refuses"]; !ok {
		t.Fatalf("rejected: %v", res.Rejected)
	}
}
