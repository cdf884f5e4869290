package placement

import (
	"errors"
	"math"

	"github.com/escra-dev/escra/internal/wysiwyg"
)

// WysiwygExt is the Node.Ext key of the host CPU allocation (WYSIWYG containers): a
// *wysiwyg.Host, the node's P1/P2/P3 pools as its escrad (or a simulator)
// holds them.
const WysiwygExt = "wysiwyg"

// WysiwygAnswerExt is the Node.Ext key of a host's own answer (a
// WysiwygAnswer) when the simulation ran on the host (its escrad, over
// CpuPlacementQuery) instead of on a local *wysiwyg.Host.
const WysiwygAnswerExt = "wysiwyg/answer"

// WysiwygAnswer is a host's simulated allocation of the request.
type WysiwygAnswer struct {
	Alloc wysiwyg.Alloc // R, P1 and P2 as the host would book them
	Err   error         // wraps wysiwyg.ErrNotWYSIWYG for a principle-hard refusal
}

// CPULabel is the request label that makes a container C1 ("wysiwyg").
const CPULabel = "escra.cpu"

// IsWysiwyg reports whether r asks for a WYSIWYG (C1) placement.
func IsWysiwyg(r *Request) bool { return r.Labels[CPULabel] == "wysiwyg" }

// Millicores is r's CPU in millicores, rounded up.
func Millicores(r *Request) int64 { return int64(math.Ceil(r.CPU*wysiwyg.Milli - 1e-6)) }

const wysiwygSimKey = "wysiwyg/sim/"

// simulate runs Algorithm 1 for r on n once per cycle (§IV-D: each
// candidate host simulates the allocation).
func simulate(c *Cycle, r *Request, n *Node) (wysiwyg.Alloc, bool, error) {
	if a, ok := n.Ext[WysiwygAnswerExt].(WysiwygAnswer); ok {
		return a.Alloc, true, a.Err
	}
	h, ok := n.Ext[WysiwygExt].(*wysiwyg.Host)
	if !ok {
		return wysiwyg.Alloc{}, false, nil
	}
	key := wysiwygSimKey + n.Name
	if v, ok := c.Read(key); ok {
		s := v.(simResult)
		return s.a, true, s.err
	}
	class := wysiwyg.C2
	if IsWysiwyg(r) {
		class = wysiwyg.C1
	}
	a, err := h.Simulate(class, Millicores(r))
	c.Write(key, simResult{a, err})
	return a, true, err
}

type simResult struct {
	a   wysiwyg.Alloc
	err error
}

// WysiwygFit drops the hosts where Algorithm 1 refuses the request: for a
// C1 container on a principle-hard host, one that cannot be WYSIWYG there.
// Nodes without a simulated allocation pass.
type WysiwygFit struct{}

func (WysiwygFit) Name() string { return "WysiwygFit" }

func (WysiwygFit) Filter(c *Cycle, r *Request, n *Node) error {
	_, ok, err := simulate(c, r, n)
	if !ok || err == nil {
		return nil
	}
	if errors.Is(err, wysiwyg.ErrNotWYSIWYG) {
		return errors.New("cannot be WYSIWYG here (principle-hard)")
	}
	return err
}

// WysiwygScore prefers, for a C1 request, the host where the simulated
// allocation has the most of its CPU on P1 cores, i.e. the least on
// shared P2 cores (§IV-D: maximize P1, minimize shared P2 time); as a
// tie-break, a host that needs no new P2 core (less fragmentation).
// Every host scores the same for a C2 request.
type WysiwygScore struct{}

func (WysiwygScore) Name() string { return "WysiwygScore" }

func (WysiwygScore) Score(c *Cycle, r *Request, n *Node) float64 {
	if !IsWysiwyg(r) {
		return MaxScore
	}
	a, ok, err := simulate(c, r, n)
	if !ok || err != nil || a.R == 0 {
		return 0
	}
	return MaxScore * float64(a.R-a.SharedMilli()) / float64(a.R)
}

// WysiwygDeployer is the deployer's profile with the WYSIWYG paper's optimized
// orchestrator-level allocation: the simulated allocation filters and
// ranks first, then the deployer's own scores.
func WysiwygDeployer() *Profile {
	return &Profile{
		Name:    "wysiwyg",
		Filters: []Filter{HostName{}, Resources{}, WysiwygFit{}},
		Scorers: []Weighted{{WysiwygScore{}, 10000}, {AppSpread{}, 1000}, {LeastLoaded{}, 1}},
	}
}
