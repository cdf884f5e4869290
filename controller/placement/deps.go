package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand"
	"strings"
)

// Dependency-aware scoring (dependency-aware scheduling §4, Algorithm 1): rank hosts by the
// bytes of the request's dependencies they already hold, at the
// granularity of whole images (image-match, §4.2) or layers (layer-match,
// §4.3), beside upstream Kubernetes' ImageLocality for comparison.

// DepsKey is the Node.Ext key under which a host's *HostDeps lives.
const DepsKey = "deps"

// Layer is one layer of an image, base first.
type Layer struct {
	// DiffID is the digest of the uncompressed layer (the config's
	// rootfs.diff_ids and the engine's RootFS.Layers): the name a layer has
	// both in the registry's config and on every engine, so the key that
	// layer-match compares.
	DiffID string
	// Size is the bytes a pull of this layer moves (the manifest's
	// compressed size when resolved from a registry).
	Size int64
}

// ImageDeps is a requested image resolved to its layers.
type ImageDeps struct {
	// Name is the normalised reference (docker.io/library/x:latest), the
	// key image-match compares; ID the image's config digest, which also
	// matches a host that holds the same image under another tag.
	Name string
	ID   string
	// Layers are base first; ChainIDs[i] is the chain id of Layers[:i+1]
	// (filled by Resolve or ChainIDs; nil disables PrefixMatch).
	Layers   []Layer
	ChainIDs []string
	// Size is the sum of Layers' sizes.
	Size int64
}

// HostDeps is what one host's image store holds, as its escrad last
// reported it (or as a simulator models it).
type HostDeps struct {
	// Images holds normalised names and image ids (sha256:…) present.
	Images map[string]bool
	// Layers holds the diff-ids of every layer of every image present.
	Layers map[string]bool
	// Chains holds the chain ids of every layer prefix present: Docker
	// reuses a layer only under the same parent chain.
	Chains map[string]bool
}

// NewHostDeps returns an empty store.
func NewHostDeps() *HostDeps {
	return &HostDeps{Images: map[string]bool{}, Layers: map[string]bool{}, Chains: map[string]bool{}}
}

// DepsOf returns the host's dependency state, nil when none is known.
func DepsOf(n *Node) *HostDeps {
	d, _ := n.Ext[DepsKey].(*HostDeps)
	return d
}

// HasImage says whether the host holds the request's image, by normalised
// name or by image id.
func (h *HostDeps) HasImage(d *ImageDeps) bool {
	if h == nil || d == nil {
		return false
	}
	return h.Images[d.Name] || (d.ID != "" && h.Images[d.ID])
}

// ChainIDs computes the OCI chain ids of a layer stack: ChainID(L0) =
// DiffID(L0), ChainID(L0..Ln) = sha256(ChainID(L0..Ln-1) + " " + DiffID(Ln))
// (OCI image spec, config.md "Layer ChainID"; dependency-aware scheduling §5.2).
func ChainIDs(diffIDs []string) []string {
	out := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		sum := sha256.Sum256([]byte(out[i-1] + " " + d))
		out[i] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return out
}

// fraction scores matched bytes out of the request's total, 0..MaxScore:
// the host with the largest overlap in bytes wins (Algorithm 1, line 5),
// on the same scale as the other plugins.
func fraction(matched int64, d *ImageDeps) float64 {
	if d == nil || d.Size <= 0 {
		return 0
	}
	return MaxScore * float64(matched) / float64(d.Size)
}

// ImageMatch scores the whole image's bytes on a host that holds it under
// the same normalised name or id, else 0 (dependency-aware scheduling §4.2).
type ImageMatch struct{}

func (ImageMatch) Name() string { return "ImageMatch" }

func (ImageMatch) Score(_ *Cycle, r *Request, n *Node) float64 {
	if DepsOf(n).HasImage(r.Deps) {
		return MaxScore
	}
	return 0
}

// LayerMatch scores the bytes of the request's layers the host holds, by
// diff-id, wherever in a stack they are (dependency-aware scheduling §4.3, §5.2).
type LayerMatch struct{}

func (LayerMatch) Name() string { return "LayerMatch" }

func (LayerMatch) Score(_ *Cycle, r *Request, n *Node) float64 {
	return fraction(LayerBytes(r.Deps, DepsOf(n)), r.Deps)
}

// LayerBytes is the bytes of d's layers present on h (each distinct
// layer counted once).
func LayerBytes(d *ImageDeps, h *HostDeps) int64 {
	if d == nil || h == nil {
		return 0
	}
	var b int64
	for i, l := range d.Layers {
		if h.Layers[l.DiffID] && !seenBefore(d.Layers, i) {
			b += l.Size
		}
	}
	return b
}

// seenBefore reports a diff-id repeated lower in the stack (an empty
// layer appears several times in real images).
func seenBefore(ls []Layer, i int) bool {
	for j := 0; j < i; j++ {
		if ls[j].DiffID == ls[i].DiffID {
			return true
		}
	}
	return false
}

// PrefixMatch scores only the longest prefix of the stack the host holds
// as a chain: what Docker's overlay2 store actually reuses, since a layer
// is stored per chain, not per diff-id.
type PrefixMatch struct{}

func (PrefixMatch) Name() string { return "PrefixMatch" }

func (PrefixMatch) Score(_ *Cycle, r *Request, n *Node) float64 {
	return fraction(PrefixBytes(r.Deps, DepsOf(n)), r.Deps)
}

// PrefixBytes is the bytes of the longest chain prefix of d present on h.
func PrefixBytes(d *ImageDeps, h *HostDeps) int64 {
	if d == nil || h == nil || len(d.ChainIDs) != len(d.Layers) {
		return 0
	}
	var b int64
	for i, c := range d.ChainIDs {
		if !h.Chains[c] {
			break
		}
		b += d.Layers[i].Size
	}
	return b
}

// Kubernetes' ImageLocality thresholds (pkg/scheduler/framework/plugins/
// imagelocality): sums below 23 MB score 0, at 1000 MB per container 100.
const (
	ImageLocalityMin int64 = 23 << 20
	ImageLocalityMax int64 = 1000 << 20
)

// ImageLocality is upstream Kubernetes' image score: the image's size
// scaled by the fraction of all hosts that hold it (so an image everywhere
// is not worth a pull-avoiding placement), clamped to 23 MB–1000 MB and
// mapped onto 0..MaxScore. It sees images by name only, not layers.
type ImageLocality struct{}

func (ImageLocality) Name() string { return "ImageLocality" }

const spreadKey = "ImageLocality/spread"

func (ImageLocality) Score(c *Cycle, r *Request, n *Node) float64 {
	if !DepsOf(n).HasImage(r.Deps) {
		return 0
	}
	spread, ok := c.Read(spreadKey)
	if !ok {
		have := 0
		for _, m := range c.Nodes {
			if DepsOf(m).HasImage(r.Deps) {
				have++
			}
		}
		spread = float64(have) / float64(max(len(c.Nodes), 1))
		c.Write(spreadKey, spread)
	}
	sum := int64(float64(r.Deps.Size) * spread.(float64))
	sum = min(max(sum, ImageLocalityMin), ImageLocalityMax)
	return MaxScore * float64(sum-ImageLocalityMin) / float64(ImageLocalityMax-ImageLocalityMin)
}

// Policies are the placement policies the dependency-aware scheduling paper compares (§6) plus upstream
// Kubernetes' (ImageLocality) and a load balancer.
var Policies = []string{"random", "least-loaded", "imagelocality", "image-match", "layer-match", "prefix-match"}

// DepProfile returns the profile of a named policy: the request must fit
// (Resources, HostName); then the policy's one scorer at full weight, as
// §5.1 of the dependency-aware scheduling paper runs them; ties go to a uniformly random host when rng is
// set ("random" is the dependency-agnostic baseline of §6). The deployer
// adds LeastLoaded at weight 1 after a dependency scorer at weight 100, so
// load only breaks ties of equal overlap.
func DepProfile(policy string, rng *rand.Rand) (*Profile, bool) {
	p := &Profile{Name: policy, Filters: []Filter{HostName{}, Resources{}}, Rand: rng}
	switch strings.ToLower(policy) {
	case "random", "agnostic":
	case "least-loaded":
		p.Scorers = []Weighted{{LeastLoaded{}, 1}}
	case "imagelocality":
		p.Scorers = []Weighted{{ImageLocality{}, 1}}
	case "image-match":
		p.Scorers = []Weighted{{ImageMatch{}, 1}}
	case "layer-match":
		p.Scorers = []Weighted{{LayerMatch{}, 1}}
	case "prefix-match":
		p.Scorers = []Weighted{{PrefixMatch{}, 1}}
	default:
		return nil, false
	}
	return p, true
}

// DependencyDeployer is the deployer's profile with the dependency-aware scheduling paper's
// dependency scores: spreading an app's replicas first (the operator's
// availability outranks startup time, §4.4 "balancing"), then the bytes of
// the image's layers already on the host (and the image by name, which
// still works when the image could not be resolved to layers), then the
// least loaded host. A percent of the image's bytes outweighs ten percent
// of free capacity.
func DependencyDeployer() *Profile {
	return &Profile{
		Name:    "deployer",
		Filters: []Filter{HostName{}, Resources{}},
		Scorers: []Weighted{{AppSpread{}, 1000}, {LayerMatch{}, 10}, {ImageMatch{}, 5}, {LeastLoaded{}, 1}},
	}
}
