// Package placement picks a host for a container in the shape of the
// Kubernetes scheduler framework: filter plugins drop the hosts that cannot
// run it, weighted score plugins rank the rest, and the highest weighted sum
// wins. Every path that places a container (the deployer, autoscalers, the
// simulators of the WYSIWYG, Mu and dependency-aware scheduling papers) goes through a Profile, so a policy
// is a list of plugins and weights, not a new code path.
//
// The package holds no state of its own: the caller builds the Nodes from
// what it knows (the controller from its sessions, a simulator from its
// model) and calls Assume after each placement of a batch.
package placement

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"
)

// MaxScore is the top of every score plugin's range, as in Kubernetes.
const MaxScore = 100

// Request is one container to place.
type Request struct {
	Name   string
	App    string
	Image  string  // as the user wrote it; plugins normalise
	CPU    float64 // cores the container is started with
	Memory int64   // bytes the container is started with
	Host   string  // required host, "" for any
	Labels map[string]string
	// Deps is the request's image resolved to its layers (dependency-aware scheduling §5.2
	// "image resolution"); nil when the controller could not resolve it,
	// and the dependency scorers then score every host 0.
	Deps *ImageDeps
}

// Node is one host as the placing code sees it at the moment of the
// decision. Plugins read it; only Assume changes it.
type Node struct {
	Name    string // the host id escrad reports
	Index   int    // the caller's handle (session id, simulator slot)
	CPUCap  float64
	CPUFree float64
	MemCap  int64
	MemFree int64
	// Containers counts the Escra containers on the host, AppCount those
	// of each app.
	Containers int
	AppCount   map[string]int
	// Ext carries what a plugin family needs and the core does not know
	// (image layers, a simulated cpuset allocation, DRF shares), keyed by
	// the plugin family's name.
	Ext map[string]any
}

// Filter drops a host: a non-nil error says why it cannot run the request.
type Filter interface {
	Name() string
	Filter(c *Cycle, r *Request, n *Node) error
}

// Scorer ranks a host that passed every filter, 0..MaxScore.
type Scorer interface {
	Name() string
	Score(c *Cycle, r *Request, n *Node) float64
}

// Normalizer is implemented by a Scorer whose raw scores only mean
// something relative to the other hosts' (Kubernetes' NormalizeScore); it
// rewrites scores (one per feasible node, in order) into 0..MaxScore.
type Normalizer interface {
	Normalize(c *Cycle, r *Request, nodes []*Node, scores []float64)
}

// Weighted is a scorer and its weight in the sum.
type Weighted struct {
	Scorer
	Weight float64
}

// Profile is a placement policy.
type Profile struct {
	Name    string
	Filters []Filter
	Scorers []Weighted
	// Rand, when set, breaks ties among the best hosts uniformly at
	// random (a simulator's "random" policy is a profile with no scorers
	// and a Rand); nil keeps the first best host in the caller's order,
	// which makes decisions reproducible.
	Rand *rand.Rand
}

// Cycle is the state of one placement decision: every node (the feasible
// and the filtered), and a scratch map where plugins keep what they
// computed once for the request (Kubernetes' CycleState).
type Cycle struct {
	Nodes []*Node
	data  map[string]any
}

// Read returns what a plugin stored under key in this cycle.
func (c *Cycle) Read(key string) (any, bool) {
	v, ok := c.data[key]
	return v, ok
}

// Write stores a value for the rest of this cycle.
func (c *Cycle) Write(key string, v any) {
	if c.data == nil {
		c.data = map[string]any{}
	}
	c.data[key] = v
}

// Result is a decision with its reasons.
type Result struct {
	Node *Node
	// Feasible are the hosts that passed every filter with their weighted
	// totals, in the caller's order.
	Feasible []Scored
	// Rejected maps a host to the first filter that dropped it.
	Rejected map[string]string
}

// Scored is one feasible host's total and its per-plugin parts.
type Scored struct {
	Node  *Node
	Total float64
	Parts map[string]float64 // plugin name → weighted score
}

// FitError says why no host can run a request, host by host.
type FitError struct {
	Request  string
	Rejected map[string]string
}

func (e *FitError) Error() string {
	if len(e.Rejected) == 0 {
		return fmt.Sprintf("container %s: no host to place it on", e.Request)
	}
	names := make([]string, 0, len(e.Rejected))
	for n := range e.Rejected {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "container %s: no host fits:", e.Request)
	for i, n := range names {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %s: %s", n, e.Rejected[n])
	}
	return b.String()
}

// Schedule runs the filters, then the scorers, and returns the best host.
// The error is a *FitError when every host was filtered out.
func (p *Profile) Schedule(r *Request, nodes []*Node) (Result, error) {
	c := &Cycle{Nodes: nodes}
	res := Result{Rejected: map[string]string{}}
	var feasible []*Node
	for _, n := range nodes {
		if why := p.filter(c, r, n); why != "" {
			res.Rejected[n.Name] = why
			continue
		}
		feasible = append(feasible, n)
	}
	if len(feasible) == 0 {
		return res, &FitError{Request: r.Name, Rejected: res.Rejected}
	}
	res.Feasible = make([]Scored, len(feasible))
	for i, n := range feasible {
		res.Feasible[i] = Scored{Node: n, Parts: map[string]float64{}}
	}
	raw := make([]float64, len(feasible))
	for _, w := range p.Scorers {
		for i, n := range feasible {
			raw[i] = w.Score(c, r, n)
		}
		if nz, ok := w.Scorer.(Normalizer); ok {
			nz.Normalize(c, r, feasible, raw)
		}
		for i := range feasible {
			s := min(max(raw[i], 0), MaxScore) * w.Weight
			res.Feasible[i].Parts[w.Name()] = s
			res.Feasible[i].Total += s
		}
	}
	best, ties := 0, 1
	for i := 1; i < len(res.Feasible); i++ {
		switch d := res.Feasible[i].Total - res.Feasible[best].Total; {
		case d > 1e-9:
			best, ties = i, 1
		case d >= -1e-9:
			// Reservoir choice among equal totals: each tie kept with
			// probability 1/ties.
			ties++
			if p.Rand != nil && p.Rand.Intn(ties) == 0 {
				best = i
			}
		}
	}
	res.Node = res.Feasible[best].Node
	return res, nil
}

func (p *Profile) filter(c *Cycle, r *Request, n *Node) string {
	for _, f := range p.Filters {
		if err := f.Filter(c, r, n); err != nil {
			return f.Name() + ": " + err.Error()
		}
	}
	return ""
}

// Assume books the request on the node, so that the next decision of the
// same batch sees it (the Kubernetes scheduler's assume step).
func Assume(r *Request, n *Node) {
	n.CPUFree -= r.CPU
	n.MemFree -= r.Memory
	n.Containers++
	if n.AppCount == nil {
		n.AppCount = map[string]int{}
	}
	n.AppCount[r.App]++
}

// Forget undoes Assume (a placement that failed to start).
func Forget(r *Request, n *Node) {
	n.CPUFree += r.CPU
	n.MemFree += r.Memory
	n.Containers--
	if n.AppCount != nil {
		n.AppCount[r.App]--
	}
}
