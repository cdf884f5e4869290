package placement

import (
	"container/heap"
	"fmt"
	"math"
)

// Mu's placement (Mu §3.5.2, Algorithm 3): DRF picks which
// function's pod goes next, a score plugin picks its node. The three node
// scorers below and Kubernetes' BalancedAllocation (for the Default
// baseline) are ordinary score plugins; PlaceDRF is the pod-selection loop.

// fracs returns, per resource (CPU, memory), capacity c, free a and demand
// d of the request on the node; resources a node does not report are left
// out.
func fracs(r *Request, n *Node) (c, a, d [2]float64, k int) {
	if n.CPUCap > 0 {
		c[k], a[k], d[k] = n.CPUCap, n.CPUFree, r.CPU
		k++
	}
	if n.MemCap > 0 {
		c[k], a[k], d[k] = float64(n.MemCap), float64(n.MemFree), float64(r.Memory)
		k++
	}
	return
}

// minMax rescales raw scores onto 0..MaxScore, keeping their order (the
// three Mu scorers' raw values are not on a fixed scale).
func minMax(s []float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range s {
		lo, hi = min(lo, v), max(hi, v)
	}
	for i, v := range s {
		if hi-lo < 1e-12 {
			s[i] = MaxScore
			continue
		}
		s[i] = MaxScore * (v - lo) / (hi - lo)
	}
}

// Alignment scores Σ_j (a_nj/c_nj)·(d_fj/c_nj) (Mu §3.5.2, after
// Tetris): the node whose free resources line up with the demand.
type Alignment struct{}

func (Alignment) Name() string { return "Alignment" }

func (Alignment) Score(_ *Cycle, r *Request, n *Node) float64 {
	c, a, d, k := fracs(r, n)
	var s float64
	for j := range k {
		s += a[j] / c[j] * d[j] / c[j]
	}
	return s
}

func (Alignment) Normalize(_ *Cycle, _ *Request, _ []*Node, s []float64) { minMax(s) }

// WorstFit scores Σ_j (a_nj − d_fj)/c_nj: the node with the most room left
// after the pod (§3.5.2's formula; the prose beside it says "least", which
// contradicts both the formula and the name: docs/mu.md).
type WorstFit struct{}

func (WorstFit) Name() string { return "WorstFit" }

func (WorstFit) Score(_ *Cycle, r *Request, n *Node) float64 {
	c, a, d, k := fracs(r, n)
	var s float64
	for j := range k {
		s += (a[j] - d[j]) / c[j]
	}
	return s
}

func (WorstFit) Normalize(_ *Cycle, _ *Request, _ []*Node, s []float64) { minMax(s) }

// BestFit is the classic best fit [22]: the node with the least room left
// after the pod, −Σ_j (a_nj − d_fj)/c_nj. Mu prints Σ (a−d)/a with
// "most resources left", which is a worst fit under another name; we keep
// the name's meaning so the three heuristics differ (docs/mu.md).
type BestFit struct{}

func (BestFit) Name() string { return "BestFit" }

func (BestFit) Score(_ *Cycle, r *Request, n *Node) float64 {
	return -WorstFit{}.Score(nil, r, n)
}

func (BestFit) Normalize(_ *Cycle, _ *Request, _ []*Node, s []float64) { minMax(s) }

// BalancedAllocation prefers the node whose CPU and memory use stay at the
// same fraction after the pod (Kubernetes' NodeResourcesBalancedAllocation,
// for two resources MaxScore·(1 − |cpu − mem|/2), fractions after the pod).
type BalancedAllocation struct{}

func (BalancedAllocation) Name() string { return "BalancedAllocation" }

func (BalancedAllocation) Score(_ *Cycle, r *Request, n *Node) float64 {
	c, a, d, k := fracs(r, n)
	if k < 2 {
		return MaxScore
	}
	u0 := (c[0] - a[0] + d[0]) / c[0]
	u1 := (c[1] - a[1] + d[1]) / c[1]
	return MaxScore * (1 - math.Abs(u0-u1)/2)
}

// MuProfile returns the profile of one of Mu's node selections
// ("alignment", "worstfit", "bestfit") or the Kubernetes default
// ("default": LeastAllocated + BalancedAllocation, equal weights).
func MuProfile(alg string) (*Profile, error) {
	f := []Filter{HostName{}, Resources{}}
	switch alg {
	case "alignment":
		return &Profile{Name: "drf_alignment", Filters: f, Scorers: []Weighted{{Alignment{}, 1}}}, nil
	case "worstfit":
		return &Profile{Name: "drf_worstfit", Filters: f, Scorers: []Weighted{{WorstFit{}, 1}}}, nil
	case "bestfit":
		return &Profile{Name: "drf_bestfit", Filters: f, Scorers: []Weighted{{BestFit{}, 1}}}, nil
	case "default":
		return &Profile{Name: "default", Filters: f, Scorers: []Weighted{{LeastLoaded{}, 1}, {BalancedAllocation{}, 1}}}, nil
	}
	return nil, fmt.Errorf("unknown placement %q (want default, alignment, worstfit or bestfit)", alg)
}

// Demand is one function's pending scale-up: Pods more pods of CPU cores
// and Memory bytes each. AllocCPU/AllocMem are what it already holds (R_f
// in Algorithm 3); PlaceDRF adds to them.
type Demand struct {
	App      string
	Image    string
	CPU      float64
	Memory   int64
	Pods     int
	AllocCPU float64
	AllocMem int64
	Placed   int // pods PlaceDRF placed
}

// Placement is one pod placed.
type Placement struct {
	App  string
	Node *Node
}

// drfItem orders functions by dominant share, then by total normalised
// demand (Module 1), then by input order for reproducibility.
type drfItem struct {
	d          *Demand
	share, sum float64
	idx        int
}

type drfHeap []*drfItem

func (h drfHeap) Len() int { return len(h) }
func (h drfHeap) Less(i, j int) bool {
	if h[i].share != h[j].share {
		return h[i].share < h[j].share
	}
	if h[i].sum != h[j].sum {
		return h[i].sum < h[j].sum
	}
	return h[i].idx < h[j].idx
}
func (h drfHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *drfHeap) Push(x any)   { *h = append(*h, x.(*drfItem)) }
func (h *drfHeap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

// PlaceDRF is Algorithm 3: while functions remain, take the one with the
// least dominant share D_f = max_j R_fj/Σ_n c_nj (ties: the smallest
// demand, summed over resources as fractions of the cluster so cores and
// bytes can be added), place one pod with the profile, book it (Assume),
// and drop the function when its pods are placed or no node fits it.
func PlaceDRF(p *Profile, ds []*Demand, nodes []*Node) []Placement {
	var totCPU, totMem float64
	for _, n := range nodes {
		totCPU += n.CPUCap
		totMem += float64(n.MemCap)
	}
	share := func(d *Demand) float64 {
		var s float64
		if totCPU > 0 {
			s = d.AllocCPU / totCPU
		}
		if totMem > 0 {
			s = max(s, float64(d.AllocMem)/totMem)
		}
		return s
	}
	h := &drfHeap{}
	for i, d := range ds {
		if d.Pods <= 0 {
			continue
		}
		var sum float64
		if totCPU > 0 {
			sum += d.CPU / totCPU
		}
		if totMem > 0 {
			sum += float64(d.Memory) / totMem
		}
		*h = append(*h, &drfItem{d: d, share: share(d), sum: sum, idx: i})
	}
	heap.Init(h)
	var out []Placement
	for h.Len() > 0 {
		it := (*h)[0]
		d := it.d
		r := &Request{Name: fmt.Sprintf("%s-%d", d.App, d.Placed), App: d.App, Image: d.Image, CPU: d.CPU, Memory: d.Memory}
		res, err := p.Schedule(r, nodes)
		if err != nil {
			heap.Pop(h) // no node fits f': drop it (lines 5–6)
			continue
		}
		Assume(r, res.Node)
		d.AllocCPU += d.CPU
		d.AllocMem += d.Memory
		d.Placed++
		out = append(out, Placement{App: d.App, Node: res.Node})
		if d.Placed >= d.Pods {
			heap.Pop(h)
			continue
		}
		it.share = share(d)
		heap.Fix(h, 0)
	}
	return out
}

// PlaceFIFO is the Kubernetes default order: pods in arrival order (each
// function's pods together, functions as given), each placed by the
// profile or left pending.
func PlaceFIFO(p *Profile, ds []*Demand, nodes []*Node) []Placement {
	var out []Placement
	for _, d := range ds {
		for d.Placed < d.Pods {
			r := &Request{Name: fmt.Sprintf("%s-%d", d.App, d.Placed), App: d.App, Image: d.Image, CPU: d.CPU, Memory: d.Memory}
			res, err := p.Schedule(r, nodes)
			if err != nil {
				break // the rest of this function's identical pods fit nowhere either
			}
			Assume(r, res.Node)
			d.AllocCPU += d.CPU
			d.AllocMem += d.Memory
			d.Placed++
			out = append(out, Placement{App: d.App, Node: res.Node})
		}
	}
	return out
}
