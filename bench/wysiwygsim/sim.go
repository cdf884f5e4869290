// Package wysiwygsim is the simulator of WYSIWYG §V: a cluster trace is
// replayed through the orchestrator-level placement (default, or
// optimized by simulating Algorithm 1 on each host, §IV-D) and the
// node-level allocator (Algorithm 1, principle-hard or best-effort), and
// it reports s, the share of C1 CPU time given on shared cores, and r,
// the share of C1 containers refused because WYSIWYG could not be
// ensured (refusals for want of CPU are not counted, as in the paper).
//
// The paper replays the Google cluster trace (Reiss et al., SoCC'12):
// 12.5k machines over a month. That trace is not available offline, so
// Trace synthesizes one with its published shape at a smaller scale:
// machines of three sizes with the trace's normalized capacities (0.25,
// 0.5, 1), heavy-tailed task sizes and lifetimes, and arrivals above the
// cluster's capacity (heavy load; no overcommit, so some tasks are
// refused for want of CPU).
package wysiwygsim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"

	"github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

// TraceConfig shapes the synthetic trace.
type TraceConfig struct {
	Machines int     // default 100
	Tasks    int     // default 20000
	Load     float64 // offered CPU / capacity, default 1.3 (heavy load)
	Seed     int64
}

// Machine is one host.
type Machine struct{ Cores int }

// Task is one container of the trace.
type Task struct {
	Arrive, Duration float64 // trace time units
	Milli            int64   // CPU request = limit (§I: request equals limit)
	U                float64 // uniform draw deciding C1 vs C2 for a fraction
}

// Trace is a synthetic cluster trace.
type Trace struct {
	Machines []Machine
	Tasks    []Task
}

// Synthesize builds a trace. Machines: 1.0 normalized = 32 cores; 6 % of
// the machines at 0.25 (8 cores), 90 % at 0.5 (16), 4 % at 1 (32), the
// trace's three capacity classes with its dominant one. Task CPU: log-
// uniform between 0.25 and 6 cores (the trace's requests span about 1 %
// to 20 % of a 0.5 machine, most of them small), a third of them rounded
// to whole cores (specs often ask whole cores); lifetimes log-normal
// (heavy-tailed, median 1 unit); Poisson arrivals at the rate that offers
// Load times the cluster's capacity.
func Synthesize(c TraceConfig) Trace {
	if c.Machines <= 0 {
		c.Machines = 100
	}
	if c.Tasks <= 0 {
		c.Tasks = 20000
	}
	if c.Load <= 0 {
		c.Load = 1.3
	}
	rng := rand.New(rand.NewSource(c.Seed))
	var tr Trace
	var capMilli float64
	for i := 0; i < c.Machines; i++ {
		cores := 16
		switch u := rng.Float64(); {
		case u < 0.06:
			cores = 8
		case u > 0.96:
			cores = 32
		}
		tr.Machines = append(tr.Machines, Machine{cores})
		capMilli += float64(cores * wysiwyg.Milli)
	}
	var sumWork float64
	for i := 0; i < c.Tasks; i++ {
		cores := math.Exp(math.Log(0.25) + rng.Float64()*(math.Log(6)-math.Log(0.25)))
		m := int64(math.Round(cores*100)) * 10
		if rng.Intn(3) == 0 {
			m = max(int64(math.Round(cores)), 1) * wysiwyg.Milli
		}
		d := math.Exp(rng.NormFloat64() * 1.0)
		tr.Tasks = append(tr.Tasks, Task{Milli: m, Duration: d, U: rng.Float64()})
		sumWork += float64(m) * d
	}
	// Offered load = arrival rate × mean work = Load × capacity.
	rate := c.Load * capMilli / (sumWork / float64(c.Tasks))
	t := 0.0
	for i := range tr.Tasks {
		t += rng.ExpFloat64() / rate
		tr.Tasks[i].Arrive = t
	}
	return tr
}

// Config is one simulation.
type Config struct {
	C1Fraction float64 // share of tasks that are C1
	Mode       wysiwyg.Mode
	Optimized  bool // place C1 by simulated allocation (§IV-D)
}

// Result is one simulation's outcome.
type Result struct {
	SPct       float64 // C1 CPU time on shared cores, % of C1 CPU time
	RPct       float64 // C1 refused for WYSIWYG, % of C1 tasks
	C1, C2     int     // tasks of each class in the trace
	C1Placed   int
	NoCapacity int     // tasks refused for want of CPU (any class)
	RejectWys  int     // C1 refused for WYSIWYG
	UtilPct    float64 // mean booked share of the cluster at arrivals
}

type departure struct {
	at   float64
	node int
	id   string
}

type depHeap []departure

func (h depHeap) Len() int           { return len(h) }
func (h depHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h depHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *depHeap) Push(x any)        { *h = append(*h, x.(departure)) }
func (h *depHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Run replays tr under c.
func Run(tr Trace, c Config) (Result, error) {
	hosts := make([]*wysiwyg.Host, len(tr.Machines))
	nodes := make([]*placement.Node, len(tr.Machines))
	for i, m := range tr.Machines {
		hosts[i] = wysiwyg.NewHost(m.Cores, c.Mode)
		hosts[i].CountShared = true // no overcommit (§V-A)
		nodes[i] = &placement.Node{Name: fmt.Sprintf("m%05d", i), Index: i, CPUCap: float64(m.Cores),
			CPUFree: float64(m.Cores), MemCap: 1, MemFree: 1, Ext: map[string]any{placement.WysiwygExt: hosts[i]}}
	}
	def := &placement.Profile{Name: "default", Filters: []placement.Filter{placement.Resources{}},
		Scorers: []placement.Weighted{{Scorer: placement.LeastLoaded{}, Weight: 1}}}
	opt := &placement.Profile{Name: "optimized", Filters: []placement.Filter{placement.Resources{}, placement.WysiwygFit{}},
		Scorers: []placement.Weighted{{Scorer: placement.WysiwygScore{}, Weight: 1000}, {Scorer: placement.LeastLoaded{}, Weight: 1}}}
	var res Result
	var deps depHeap
	var sharedWork, c1Work, utilSum float64
	var capTotal int64
	for _, m := range tr.Machines {
		capTotal += int64(m.Cores) * wysiwyg.Milli
	}
	var booked int64
	free := func(n int, a wysiwyg.Alloc) {
		nodes[n].CPUFree += float64(a.R) / wysiwyg.Milli
		booked -= a.R
	}
	for i, t := range tr.Tasks {
		for deps.Len() > 0 && deps[0].at <= t.Arrive {
			d := heap.Pop(&deps).(departure)
			a, _ := hosts[d.node].Get(d.id)
			hosts[d.node].Remove(d.id)
			free(d.node, a)
		}
		utilSum += float64(booked) / float64(capTotal)
		c1 := t.U < c.C1Fraction
		req := &placement.Request{Name: fmt.Sprint(i), CPU: float64(t.Milli) / wysiwyg.Milli, Memory: 0}
		class := wysiwyg.C2
		if c1 {
			res.C1++
			class = wysiwyg.C1
			req.Labels = map[string]string{placement.CPULabel: "wysiwyg"}
		} else {
			res.C2++
		}
		p := def
		if c1 && c.Optimized {
			p = opt
		}
		sr, err := p.Schedule(req, nodes)
		if err != nil {
			var fe *placement.FitError
			if errors.As(err, &fe) && c1 && anyWysiwygRejection(fe) {
				res.RejectWys++
			} else {
				res.NoCapacity++
			}
			continue
		}
		n := sr.Node.Index
		id := req.Name
		if _, err := hosts[n].Add(id, class, t.Milli); err != nil {
			if c1 && errors.Is(err, wysiwyg.ErrNotWYSIWYG) {
				res.RejectWys++
			} else {
				res.NoCapacity++
			}
			continue
		}
		a, _ := hosts[n].Get(id)
		nodes[n].CPUFree -= float64(a.R) / wysiwyg.Milli
		booked += a.R
		if c1 {
			res.C1Placed++
			sharedWork += float64(a.SharedMilli()) * t.Duration
			c1Work += float64(a.R) * t.Duration
		}
		heap.Push(&deps, departure{at: t.Arrive + t.Duration, node: n, id: id})
	}
	if c1Work > 0 {
		res.SPct = 100 * sharedWork / c1Work
	}
	if res.C1 > 0 {
		res.RPct = 100 * float64(res.RejectWys) / float64(res.C1)
	}
	if len(tr.Tasks) > 0 {
		res.UtilPct = 100 * utilSum / float64(len(tr.Tasks))
	}
	return res, nil
}

// anyWysiwygRejection: some host had the CPU but not a WYSIWYG allocation.
func anyWysiwygRejection(fe *placement.FitError) bool {
	for _, why := range fe.Rejected {
		if strings.Contains(why, notWysiwyg) {
			return true
		}
	}
	return false
}

const notWysiwyg = "cannot be WYSIWYG"
