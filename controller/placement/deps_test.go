package placement

import (
	"math"
	"math/rand"
	"testing"
)

// depNode is a host holding the given images (each a list of layers).
func depNode(name string, imgs ...*ImageDeps) *Node {
	d := NewHostDeps()
	for _, im := range imgs {
		d.Images[im.Name] = true
		if im.ID != "" {
			d.Images[im.ID] = true
		}
		for _, l := range im.Layers {
			d.Layers[l.DiffID] = true
		}
		for _, c := range im.ChainIDs {
			d.Chains[c] = true
		}
	}
	return &Node{Name: name, CPUCap: 4, CPUFree: 4, AppCount: map[string]int{}, Ext: map[string]any{DepsKey: d}}
}

func img(name string, layers ...Layer) *ImageDeps {
	d := &ImageDeps{Name: name, Layers: layers}
	var ids []string
	for _, l := range layers {
		d.Size += l.Size
		ids = append(ids, l.DiffID)
	}
	d.ChainIDs = ChainIDs(ids)
	return d
}

const mb = 1 << 20

func TestDependencyScores(t *testing.T) {
	base := Layer{"sha256:base", 60 * mb}
	py := Layer{"sha256:py", 30 * mb}
	app := Layer{"sha256:app", 10 * mb}
	other := Layer{"sha256:other", 5 * mb}
	want := img("docker.io/library/app:latest", base, py, app)
	want.ID = "sha256:cfg"
	// a: the very image; b: the same base and python under another
	// image; c: python alone on another base (no chain prefix); d: empty.
	a := depNode("a", want)
	b := depNode("b", img("docker.io/library/py:3", base, py, other))
	c := depNode("c", img("docker.io/library/x:1", other, py))
	d := depNode("d")
	e := depNode("e", &ImageDeps{Name: "docker.io/library/retag:v2", ID: "sha256:cfg"})
	r := &Request{Name: "r", CPU: 1, Deps: want}
	cases := []struct {
		s    Scorer
		node *Node
		want float64
	}{
		{ImageMatch{}, a, 100}, {ImageMatch{}, b, 0}, {ImageMatch{}, d, 0},
		{ImageMatch{}, e, 100}, // same image id under another tag
		{LayerMatch{}, a, 100}, {LayerMatch{}, b, 90}, {LayerMatch{}, c, 30}, {LayerMatch{}, d, 0},
		{PrefixMatch{}, a, 100}, {PrefixMatch{}, b, 90}, {PrefixMatch{}, c, 0},
	}
	for _, tc := range cases {
		if got := tc.s.Score(&Cycle{}, r, tc.node); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s on %s: %.2f, want %.2f", tc.s.Name(), tc.node.Name, got, tc.want)
		}
	}
	// No resolution, no dependency score.
	if s := (LayerMatch{}).Score(&Cycle{}, &Request{Name: "x"}, a); s != 0 {
		t.Errorf("unresolved request scored %.1f", s)
	}
	// A layer repeated in the stack counts once.
	rep := img("rep", base, base)
	if got := LayerBytes(rep, DepsOf(a)); got != base.Size {
		t.Errorf("repeated layer counted %d bytes, want %d", got, base.Size)
	}
	// Layer-match places on the most overlapping feasible host; a full
	// host is filtered out whatever it holds.
	p, _ := DepProfile("layer-match", rand.New(rand.NewSource(1)))
	a.CPUFree = 0
	res, err := p.Schedule(r, []*Node{d, c, a, b})
	if err != nil || res.Node != b {
		t.Fatalf("layer-match picked %v (%v), want b", res.Node, err)
	}
	if _, ok := DepProfile("nope", nil); ok {
		t.Error("unknown policy accepted")
	}
}

func TestImageLocalityIsKubernetes(t *testing.T) {
	// Kubernetes' ImageLocality: size × (hosts holding it / all hosts),
	// clamped to [23 MB, 1000 MB], mapped to 0..100.
	big := img("big", Layer{"l1", 500 * mb})
	small := img("small", Layer{"l2", 10 * mb})
	huge := img("huge", Layer{"l3", 3000 * mb})
	n1 := depNode("n1", big, small, huge)
	n2 := depNode("n2", huge)
	c := &Cycle{Nodes: []*Node{n1, n2}}
	want := 100 * float64(250*mb-ImageLocalityMin) / float64(ImageLocalityMax-ImageLocalityMin)
	if got := (ImageLocality{}).Score(c, &Request{Deps: big}, n1); math.Abs(got-want) > 1e-6 {
		t.Errorf("500 MB on half the hosts: %.3f, want %.3f", got, want)
	}
	if got := (ImageLocality{}).Score(&Cycle{Nodes: c.Nodes}, &Request{Deps: small}, n1); got != 0 {
		t.Errorf("10 MB image: %.3f, want 0 (below the 23 MB floor)", got)
	}
	if got := (ImageLocality{}).Score(&Cycle{Nodes: c.Nodes}, &Request{Deps: huge}, n2); got != 100 {
		t.Errorf("3 GB image everywhere: %.3f, want 100 (clamped)", got)
	}
	if got := (ImageLocality{}).Score(&Cycle{Nodes: c.Nodes}, &Request{Deps: big}, n2); got != 0 {
		t.Errorf("host without the image: %.3f", got)
	}
}

func TestChainIDs(t *testing.T) {
	// The OCI spec's definition, checked on its own example shape: the
	// first chain id is the diff id; each next one hashes "parent diff".
	ids := ChainIDs([]string{"sha256:a", "sha256:b", "sha256:c"})
	if ids[0] != "sha256:a" {
		t.Errorf("chain 0 = %s", ids[0])
	}
	// sha256("sha256:a sha256:b"), computed apart with Python's hashlib.
	if ids[1] != "sha256:970a948bffa8de94d6e22d747ba8c95030e6e546909f98f54e99a13005e173a8" {
		t.Errorf("chain 1 = %s", ids[1])
	}
	again := ChainIDs([]string{"sha256:a", "sha256:b", "sha256:x"})
	if again[1] != ids[1] || again[2] == ids[2] {
		t.Error("chain ids must share the common prefix and differ after it")
	}
}
