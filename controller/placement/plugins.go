package placement

import (
	"fmt"
)

// cpuEps absorbs float error in sums of fractional cores.
const cpuEps = 1e-6

// HostName keeps only the host a request names (Kubernetes' NodeName).
type HostName struct{}

func (HostName) Name() string { return "HostName" }

func (HostName) Filter(_ *Cycle, r *Request, n *Node) error {
	if r.Host != "" && r.Host != n.Name {
		return fmt.Errorf("request is pinned to %s", r.Host)
	}
	return nil
}

// Resources keeps the hosts with room for the request's start limits
// (Kubernetes' NodeResourcesFit).
type Resources struct{}

func (Resources) Name() string { return "Resources" }

func (Resources) Filter(_ *Cycle, r *Request, n *Node) error {
	if n.CPUFree+cpuEps < r.CPU {
		return fmt.Errorf("%.2f free cores, %.2f asked", max(n.CPUFree, 0), r.CPU)
	}
	if n.MemFree < r.Memory {
		return fmt.Errorf("%d MiB free memory, %d MiB asked", max(n.MemFree, 0)>>20, r.Memory>>20)
	}
	return nil
}

// LeastLoaded prefers the host with the largest free share of CPU and
// memory after the request (Kubernetes' LeastAllocated: the mean of the
// two free fractions).
type LeastLoaded struct{}

func (LeastLoaded) Name() string { return "LeastLoaded" }

func (LeastLoaded) Score(_ *Cycle, r *Request, n *Node) float64 {
	var s float64
	var k int
	if n.CPUCap > 0 {
		s += max(n.CPUFree-r.CPU, 0) / n.CPUCap
		k++
	}
	if n.MemCap > 0 {
		s += float64(max(n.MemFree-r.Memory, 0)) / float64(n.MemCap)
		k++
	}
	if k == 0 {
		return 0
	}
	return MaxScore * s / float64(k)
}

// AppSpread prefers the hosts with the fewest containers of the request's
// app, so one host's failure takes the fewest replicas (Kubernetes'
// PodTopologySpread, per host). Normalised: the emptiest host scores
// MaxScore, the fullest 0.
type AppSpread struct{}

func (AppSpread) Name() string { return "AppSpread" }

func (AppSpread) Score(_ *Cycle, r *Request, n *Node) float64 {
	return float64(n.AppCount[r.App])
}

func (AppSpread) Normalize(_ *Cycle, _ *Request, _ []*Node, s []float64) {
	lo, hi := s[0], s[0]
	for _, v := range s {
		lo, hi = min(lo, v), max(hi, v)
	}
	for i, v := range s {
		if hi == lo {
			s[i] = MaxScore
			continue
		}
		s[i] = MaxScore * (hi - v) / (hi - lo)
	}
}

// Deployer is the profile `escractl apply` places with: a host with room
// for the start limits; among those, spreading the app's replicas comes
// first (its weight outranks any difference in load), then the least
// loaded host; equal hosts go to the first in the caller's order.
func Deployer() *Profile {
	return &Profile{
		Name:    "deployer",
		Filters: []Filter{HostName{}, Resources{}},
		Scorers: []Weighted{{AppSpread{}, 1000}, {LeastLoaded{}, 1}},
	}
}
