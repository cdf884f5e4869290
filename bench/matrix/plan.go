package matrix

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// The plan is every run a matrix makes and the wall-clock each is expected
// to take: bench-run prints "plan: N runs, estimated M min" before it
// starts, and bench-run -plan prints the table and exits without Docker.
// Each run's real wall-clock (report.Run.WallS) is printed beside its
// estimate, so the constants below can be checked on every run.
//
// The costs, in seconds, besides the run's duration. They were measured on
// this 2-core machine (docs/benchmarks.md, "What the quick matrix runs and
// why", has the command and the figures):
const (
	// PlanRunFixedS is per run: the sampler's and OOM watcher's start,
	// the 300 ms left for the last samples and events, the client's last
	// in-flight requests at an unthrottled limit.
	PlanRunFixedS = 0.5
	// PlanReplicaS is per container and run: docker create and start,
	// the ready probe, and the forced remove at the end.
	PlanReplicaS = 0.5
	// PlanDrainS is what an open-loop client waits after its schedule
	// ends when the limits sit below the 1 s peak: every burst queues
	// requests, and the last ones are answered or time out (the client's
	// timeout is 5 s; the allocator A/B of docs/allocator.md measured
	// p99.9 up to 2.4 s at 0.75 × the peak). The timeout is counted,
	// the worst case.
	PlanDrainS = 5.0
	// PlanRedisTailS: redis-benchmark runs in chunks of 20,000 requests
	// per test until the duration has passed; the last chunk overruns it
	// by half a chunk on average (≈ 0.46 s a chunk of SET and GET at
	// 87k req/s), plus the process start of each chunk.
	PlanRedisTailS = 0.5
	// PlanBatchS is per +batch run: SIGCONT and SIGSTOP of the batch
	// container; PlanBatchCreateS its one docker create and start.
	PlanBatchS       = 0.1
	PlanBatchCreateS = 1.3
	// Fixed costs of a run of bench-run: the images (built once, then
	// found by their content tag), escra-controller and escrad's start
	// (two waits of 0.5 s and 1 s), the apply-latency and restart
	// measurement on one demo-http container, and the report (bootstrap
	// intervals and PNG plots of every cell; 1.8 s on a made-up results
	// of the quick plan with 18 s series).
	PlanImagesS     = 5.0
	PlanEscraStartS = 1.5
	PlanOverheadS   = 5.0
	PlanReportS     = 5.0
)

// ProfilePolicy names a cell's profiling run in a plan.
const ProfilePolicy = "profile"

// PlanRun is one run of a plan.
type PlanRun struct {
	Cell    Cell
	Policy  string // ProfilePolicy for the cell's profiling run
	Rep     int    // 0-based
	Seconds float64
}

// PlanCost is a fixed cost of a plan (not a run).
type PlanCost struct {
	What    string
	Seconds float64
}

// Plan is every run of a matrix, in the order Profile and Run make them,
// and its fixed costs.
type Plan struct {
	Runs  []PlanRun
	Fixed []PlanCost
	cells []Cell
	c     Config
}

// PlanOptions are what the caller knows before any container runs.
type PlanOptions struct {
	// Escra: escrad and escra-controller will run; without them Run
	// skips Escra's policies.
	Escra bool
	// Profiled: the profiles come from an earlier run (bench-run
	// -profiles), so no profiling run is made.
	Profiled bool
}

// Plan lists every run Profile and Run will make with these options.
func (c Config) Plan(o PlanOptions) Plan {
	p := Plan{cells: c.Cells(), c: c}
	if !o.Profiled {
		for _, cell := range p.cells {
			p.Runs = append(p.Runs, PlanRun{Cell: cell, Policy: ProfilePolicy, Seconds: c.runSeconds(cell, ProfilePolicy)})
		}
	}
	batch := false
	for rep := 0; rep < max(1, c.Reps); rep++ {
		for ci, cell := range p.cells {
			for _, pol := range PolicyOrder(c.cellPolicies(cell), c.OrderSeed, rep, ci) {
				if IsEscra(pol) && !o.Escra {
					continue
				}
				_, b := SplitBatch(pol)
				batch = batch || b
				p.Runs = append(p.Runs, PlanRun{Cell: cell, Policy: pol, Rep: rep, Seconds: c.runSeconds(cell, pol)})
			}
		}
	}
	p.Fixed = append(p.Fixed, PlanCost{"images", PlanImagesS})
	if o.Escra && c.WantsEscra() {
		p.Fixed = append(p.Fixed, PlanCost{"escra-controller and escrad start", PlanEscraStartS})
	}
	if batch {
		p.Fixed = append(p.Fixed, PlanCost{"batch container create", PlanBatchCreateS})
	}
	p.Fixed = append(p.Fixed, PlanCost{"apply latency and restart measurement", PlanOverheadS}, PlanCost{"report", PlanReportS})
	return p
}

// runSeconds is the estimated wall-clock of one run of policy on cell.
func (c Config) runSeconds(cell Cell, policy string) float64 {
	w, _ := WorkloadByName(cell.Workload)
	s := c.Duration.Seconds() + PlanRunFixedS + PlanReplicaS*float64(w.Replicas)
	switch {
	case w.NoClient, cell.Load == "wrk":
	case cell.Load == "redis-benchmark":
		s += PlanRedisTailS
	case policy != ProfilePolicy && ReservesBelowPeak(policy):
		s += PlanDrainS
	}
	if _, b := SplitBatch(policy); b {
		s += PlanBatchS
	}
	return s
}

// ReservesBelowPeak: the policy's limits (or Escra's budget) are below
// Σ the 1 s peaks of the cell, so bursts queue requests.
func ReservesBelowPeak(policy string) bool {
	base, _ := SplitBatch(policy)
	if IsEscra(base) {
		return FrontierK(base) < 1
	}
	k, cores, ok := staticRule(base, Peak{CPU: 1, CPUMon: 1, CPUP90: 1})
	if !ok {
		return false
	}
	// static15mon and vpastatic multiply a figure that averages over
	// 10 s or more: below the 1 s peak wherever the load bursts.
	return k*cores < 1 || base == "static15mon" || base == "vpastatic"
}

// Seconds is the plan's estimated wall-clock.
func (p Plan) Seconds() float64 {
	s := 0.0
	for _, r := range p.Runs {
		s += r.Seconds
	}
	for _, f := range p.Fixed {
		s += f.Seconds
	}
	return s
}

// Minutes is Seconds in minutes, rounded up to a tenth.
func (p Plan) Minutes() float64 { return math.Ceil(p.Seconds()/6) / 10 }

// Profiling counts the plan's profiling runs.
func (p Plan) Profiling() int {
	n := 0
	for _, r := range p.Runs {
		if r.Policy == ProfilePolicy {
			n++
		}
	}
	return n
}

// Summary is the line bench-run prints before it starts.
func (p Plan) Summary() string {
	return fmt.Sprintf("plan: %d runs (%d profiling), estimated %.1f min", len(p.Runs), p.Profiling(), p.Minutes())
}

// Table is the plan per cell: its containers, policies, runs and
// seconds, then the fixed costs and the total.
func (p Plan) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tcontainers\tpolicies (× reps)\truns\tseconds")
	for _, cell := range p.cells {
		var pols []string
		runs, secs := 0, 0.0
		for _, r := range p.Runs {
			if r.Cell != cell {
				continue
			}
			runs++
			secs += r.Seconds
			if r.Policy != ProfilePolicy && !slices.Contains(pols, r.Policy) {
				pols = append(pols, r.Policy)
			}
		}
		slices.SortStableFunc(pols, func(a, b string) int { return strings.Compare(a, b) })
		w, _ := WorkloadByName(cell.Workload)
		fmt.Fprintf(tw, "%s\t%d\t%s (× %d)\t%d\t%.0f\n", cell.Name(), w.Replicas, strings.Join(pols, " "), max(1, p.c.Reps), runs, secs)
	}
	for _, f := range p.Fixed {
		fmt.Fprintf(tw, "%s\t\t\t\t%.1f\n", f.What, f.Seconds)
	}
	fmt.Fprintf(tw, "total\t\truns of %s\t%d\t%.0f (%.1f min)\n", p.c.Duration, len(p.Runs), p.Seconds(), p.Minutes())
	tw.Flush()
	return b.String()
}
