// Package depsim is the dependency-aware scheduling paper's cluster simulator (§6.1 iv): Poisson pod
// arrivals over a synthetic image corpus, placed through the same
// controller/placement profiles the controller uses, with per-node image
// stores, eviction, and pull cost = Σ pull time of the missing layers.
package depsim

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"

	"github.com/escra-dev/escra/controller/placement"
)

// CorpusConfig shapes the synthetic image corpus. The defaults reproduce
// dependency-aware scheduling Table 1 and §4.3: 56,218 images, 11.95 layers per image, 383K
// unique of 675K layer references (57 %), mean layer pull 1.75 s, mean
// image pull 19.2 s, mean image 590 MB (33.15 TB / 56,218).
type CorpusConfig struct {
	Images     int
	MeanLayers float64 // layers per image (1 + Poisson(MeanLayers-1))
	// ShareProb is the chance an image derives from an earlier one (a new
	// tag of a repository, or a FROM of a base) and starts with a prefix
	// of its layers; it sets the unique-layer fraction.
	ShareProb float64
	// Layer sizes are log-normal with this mean and shape (heavy tail:
	// most layers are small, a few are gigabytes).
	LayerMeanBytes float64
	LayerSigma     float64
	// Pull time of a layer = PullBaseS + size / PullBytesPerS (the dependency-aware scheduling paper
	// Fig 2 is close to linear in size with a fixed registration cost;
	// fitted so the two means of Table 1 hold: 0.28 s + 37 MB/s).
	PullBaseS     float64
	PullBytesPerS float64
	Seed          int64
}

// DefaultCorpus is Table 1's corpus.
func DefaultCorpus() CorpusConfig {
	return CorpusConfig{Images: 56218, MeanLayers: 11.95, ShareProb: 0.7,
		LayerMeanBytes: 52e6, LayerSigma: 1.5, PullBaseS: 0.28, PullBytesPerS: 37.2e6, Seed: 4}
}

// Image is one image of the corpus with its placement request.
type Image struct {
	Layers []int32
	Size   int64
	PullS  float64 // all layers pulled
	Req    placement.Request
}

// Corpus is the image set and its layers.
type Corpus struct {
	Images    []Image
	LayerSize []int64
	LayerPull []float64
}

// CorpusStats are the Table 1 figures of a corpus.
type CorpusStats struct {
	Images, Layers, LayerRefs int
	UniqueFrac                float64
	LayersPerImage            float64
	MeanImageBytes            float64
	MeanLayerPullS            float64
	MeanImagePullS            float64
}

// NewCorpus builds a corpus deterministically from its seed.
func NewCorpus(c CorpusConfig) (*Corpus, error) {
	if c.Images <= 0 || c.MeanLayers < 1 || c.LayerMeanBytes <= 0 || c.PullBytesPerS <= 0 {
		return nil, fmt.Errorf("corpus: images, layers, layer size and pull rate must be positive")
	}
	rng := rand.New(rand.NewSource(c.Seed))
	mu := math.Log(c.LayerMeanBytes) - c.LayerSigma*c.LayerSigma/2
	cp := &Corpus{Images: make([]Image, c.Images)}
	newLayer := func() int32 {
		sz := int64(math.Exp(mu + c.LayerSigma*rng.NormFloat64()))
		sz = max(sz, 1024)
		cp.LayerSize = append(cp.LayerSize, sz)
		cp.LayerPull = append(cp.LayerPull, c.PullBaseS+float64(sz)/c.PullBytesPerS)
		return int32(len(cp.LayerSize) - 1)
	}
	for i := range cp.Images {
		n := 1 + poisson(rng, c.MeanLayers-1)
		var ls []int32
		if i > 0 && rng.Float64() < c.ShareProb {
			// Derived: a prefix of an earlier image (earlier images are
			// parents more often, as popular bases are).
			p := cp.Images[rng.Intn(i)].Layers
			// It keeps between half and all of the parent's stack (a
			// new tag rebuilds its top layers, a FROM keeps the base).
			k := min(len(p), n-1)
			if k > 1 {
				k = (k+1)/2 + rng.Intn(k-(k+1)/2+1)
			}
			ls = append(ls, p[:max(k, 0)]...)
		}
		for len(ls) < n {
			ls = append(ls, newLayer())
		}
		img := &cp.Images[i]
		img.Layers = ls
		deps := &placement.ImageDeps{Name: "sim/img" + strconv.Itoa(i) + ":latest"}
		for _, l := range ls {
			img.Size += cp.LayerSize[l]
			img.PullS += cp.LayerPull[l]
			deps.Layers = append(deps.Layers, placement.Layer{DiffID: layerName(l), Size: cp.LayerSize[l]})
		}
		deps.Size = img.Size
		img.Req = placement.Request{Name: deps.Name, Image: deps.Name, CPU: 1, Deps: deps}
	}
	return cp, nil
}

// layerName is a layer's key in the plugins' maps: short, since the
// simulator looks up millions of them.
func layerName(l int32) string { return "L" + strconv.Itoa(int(l)) }

// Stats summarises the corpus as Table 1 does.
func (cp *Corpus) Stats() CorpusStats {
	s := CorpusStats{Images: len(cp.Images), Layers: len(cp.LayerSize)}
	var bytes, pull float64
	for _, im := range cp.Images {
		s.LayerRefs += len(im.Layers)
		bytes += float64(im.Size)
		pull += im.PullS
	}
	var lp float64
	for _, p := range cp.LayerPull {
		lp += p
	}
	s.UniqueFrac = float64(s.Layers) / float64(s.LayerRefs)
	s.LayersPerImage = float64(s.LayerRefs) / float64(s.Images)
	s.MeanImageBytes = bytes / float64(s.Images)
	s.MeanImagePullS = pull / float64(s.Images)
	s.MeanLayerPullS = lp / float64(s.Layers)
	return s
}

func poisson(rng *rand.Rand, lambda float64) int {
	if lambda <= 0 {
		return 0
	}
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}
