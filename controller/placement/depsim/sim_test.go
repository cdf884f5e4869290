package depsim

import (
	"testing"

	"github.com/escra-dev/escra/controller/placement"
)

func TestCorpusHasTable1Statistics(t *testing.T) {
	cp, err := NewCorpus(DefaultCorpus())
	if err != nil {
		t.Fatal(err)
	}
	s := cp.Stats()
	check := func(name string, got, lo, hi float64) {
		if got < lo || got > hi {
			t.Errorf("%s = %.3f, want in [%.3f, %.3f] (dependency-aware scheduling Table 1)", name, got, lo, hi)
		}
	}
	check("layers per image", s.LayersPerImage, 11.5, 12.5)
	check("unique layer fraction", s.UniqueFrac, 0.52, 0.62)
	check("mean layer pull s", s.MeanLayerPullS, 1.5, 2.0)
	check("mean image pull s", s.MeanImagePullS, 17, 22)
	again, _ := NewCorpus(DefaultCorpus())
	if again.Stats() != s {
		t.Error("the same seed built a different corpus")
	}
	if _, err := NewCorpus(CorpusConfig{}); err == nil {
		t.Error("an empty corpus config was accepted")
	}
}

// tiny builds a corpus by hand: layer sizes in bytes, images as layer ids.
func tiny(sizes []int64, images ...[]int32) *Corpus {
	cp := &Corpus{LayerSize: sizes}
	for range sizes {
		cp.LayerPull = append(cp.LayerPull, 0.1)
	}
	for i, ls := range images {
		deps := &placement.ImageDeps{Name: "img" + string(rune('A'+i))}
		im := Image{Layers: ls}
		for _, l := range ls {
			im.Size += sizes[l]
			deps.Layers = append(deps.Layers, placement.Layer{DiffID: layerName(l), Size: sizes[l]})
		}
		deps.Size = im.Size
		im.Req = placement.Request{Name: deps.Name, CPU: 1, Deps: deps}
		cp.Images = append(cp.Images, im)
	}
	return cp
}

func oneNode(cp *Corpus, cache int64, evict string) (*sim, *node) {
	d := placement.NewHostDeps()
	n := &node{pn: &placement.Node{Name: "n", CPUCap: 16, CPUFree: 16, AppCount: map[string]int{},
		Ext: map[string]any{placement.DepsKey: d}}, deps: d, layers: map[int32]*lstate{}, images: map[int32]*istate{}}
	return &sim{cfg: Config{CacheBytes: cache, Evict: evict}, cp: cp, nodes: []*node{n}, free: 16}, n
}

// use runs image i to completion at time t.
func use(sm *sim, n *node, i int32, t float64) float64 {
	pull := sm.provision(n, i, t)
	sm.finish(done{node: 0, img: i})
	return pull
}

func has(n *node, ls ...int32) bool {
	for _, l := range ls {
		if n.layers[l] == nil || !n.deps.Layers[layerName(l)] {
			return false
		}
	}
	return true
}

func TestEvictionOrder(t *testing.T) {
	// Layers 0..4 of 10 bytes; A = {0,1}, B = {0,2}, C = {3}, D = {4}.
	sizes := []int64{10, 10, 10, 10, 10}
	imgs := [][]int32{{0, 1}, {0, 2}, {3}, {4}}

	t.Run("lru-image", func(t *testing.T) {
		sm, n := oneNode(tiny(sizes, imgs...), 40, "lru-image")
		use(sm, n, 0, 1) // A
		use(sm, n, 1, 2) // B shares layer 0: 10 more bytes
		if p := use(sm, n, 1, 2.5); p != 0 {
			t.Errorf("cached image pulled for %.2f s", p)
		}
		if p := sm.provision(n, 2, 2.6); p != 0.1 {
			t.Errorf("one missing layer: pull %.2f s, want 0.1", p)
		}
		if p := sm.provision(n, 2, 2.65); p < 0.04 || p > 0.06 {
			t.Errorf("a layer still being pulled: waited %.3f s, want 0.05", p)
		}
		sm.finish(done{node: 0, img: 2})
		sm.finish(done{node: 0, img: 2})
		use(sm, n, 2, 3) // C: store full (40)
		use(sm, n, 3, 4) // D: A is least recently used and goes, layer 0 stays for B
		if n.images[0] != nil || n.deps.Images["imgA"] || has(n, 1) {
			t.Error("LRU image A was not removed with its own layer")
		}
		if !has(n, 0, 2, 3, 4) || n.used != 40 {
			t.Errorf("shared layer or the others lost; used %d", n.used)
		}
	})
	t.Run("running images stay", func(t *testing.T) {
		sm, n := oneNode(tiny(sizes, imgs...), 20, "lru-image")
		sm.provision(n, 0, 1) // A runs
		use(sm, n, 2, 2)      // C over budget: nothing evictable but A... which runs
		if !has(n, 0, 1, 3) {
			t.Error("a running container's image was evicted")
		}
	})
	t.Run("lru-layer", func(t *testing.T) {
		sm, n := oneNode(tiny(sizes, imgs...), 40, "lru-layer")
		use(sm, n, 0, 1) // layers 0,1 at t=1
		use(sm, n, 1, 2) // 0,2 at t=2
		use(sm, n, 2, 3) // 3
		use(sm, n, 3, 4) // 4: layer 1 is the least recently used layer
		if has(n, 1) || !has(n, 0, 2, 3, 4) {
			t.Errorf("LRU layer: want layer 1 evicted, have %v", n.layers)
		}
		if n.images[0] != nil || n.images[1] == nil {
			t.Error("image A should stop being cached, B stay")
		}
	})
	t.Run("lfu-layer", func(t *testing.T) {
		sm, n := oneNode(tiny(sizes, imgs...), 40, "lfu-layer")
		use(sm, n, 2, 1) // layer 3, used once, oldest
		use(sm, n, 2, 1.5)
		use(sm, n, 2, 1.6) // layer 3 used 3 times
		use(sm, n, 0, 2)   // 0,1
		use(sm, n, 1, 3)   // 0 (twice), 2
		use(sm, n, 3, 4)   // 4: least frequently used is 1 (once, t=2) before 2 (once, t=3)
		if has(n, 1) || !has(n, 0, 2, 3, 4) {
			t.Errorf("LFU layer: want layer 1 evicted, have %v", n.layers)
		}
	})
}

func TestDependencySchedulingWinsInTheSimulation(t *testing.T) {
	cc := DefaultCorpus()
	cc.Images = 4000
	cp, err := NewCorpus(cc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Nodes, cfg.CacheBytes = 20, 8e9
	cfg.DurationS, cfg.WarmupS = 300, 150
	cfg.Rate, err = Calibrate(cfg, cp, 0.8)
	if err != nil {
		t.Fatal(err)
	}
	mean := map[string]float64{}
	for _, p := range []string{"random", "image-match", "layer-match"} {
		cfg.Policy = p
		r, err := Run(cfg, cp)
		if err != nil {
			t.Fatal(err)
		}
		if r.Requests < 1000 {
			t.Fatalf("%s: only %d requests measured", p, r.Requests)
		}
		mean[p] = r.MeanStartupS
	}
	t.Logf("mean startup: %v", mean)
	if !(mean["layer-match"] < mean["image-match"] && mean["image-match"] < mean["random"]) {
		t.Errorf("want layer-match < image-match < random, got %v", mean)
	}
	cfg.Policy = "layer-match"
	again, _ := Run(cfg, cp)
	if again.MeanStartupS != mean["layer-match"] {
		t.Error("the same seed gave a different result")
	}
	cfg.Evict = "lfu-layer"
	if _, err := Run(cfg, cp); err != nil {
		t.Error(err)
	}
	cfg.Evict = "fifo"
	if _, err := Run(cfg, cp); err == nil {
		t.Error("unknown eviction accepted")
	}
}
