package matrix

import "time"

// The two matrices of `make bench` (docs/benchmarks.md, "What the quick
// matrix runs and why"). Both share the workloads; the full matrix runs
// every load and every policy on every cell it applies to (the frontier,
// static15mon and vpastatic on the offset cells only, OffsetOnly); the
// quick matrix runs on each cell only the policies a summary key or a
// report figure of that cell reads, so that it fits 40 minutes on an
// idle 2-core machine (TestQuickPlanFits).

// AllWorkloads are every workload of the benchmark, in run order.
var AllWorkloads = []string{"demo-http", "chain", "nginx", "redis", "memwave", "offset-pair", "front-worker", "fanout"}

// QuickPlain are the quick matrix's cells whose containers peak together
// (Table I's cells: non-inferiority, slack, overhead); QuickOffset its
// cells whose containers peak apart (the frontier, the operators'
// baselines).
var (
	QuickPlain  = []string{"demo-http/burst", "chain/burst", "nginx/burst", "nginx/wrk", "redis/redis-benchmark", "memwave/wave"}
	QuickOffset = []string{"offset-pair/burst", "front-worker/periodic", "fanout/shift"}
	// QuickBatch are the cells of the quick matrix's +batch pair: demo-http/burst,
	// whose Σ static15 (0.85 core) leaves static15's batch container a
	// share of the app CPU, so escra_batch_cores_ratio has a non-zero
	// denominator; chain/burst's Σ static15 is above its one CPU and
	// leaves static15's batch nothing.
	QuickBatch = []string{"demo-http/burst"}
)

// The policies of each matrix.
var (
	quickPolicies = []string{"static15", "escra", "autopilot", "static15mon", "vpastatic", "escra-k100", "static15+batch", "escra+batch"}
	fullPolicies  = []string{"static15", "static15mon", "vpastatic", "static05", "static075", "static10", "escra-k050", "escra-k075", "escra-k100",
		"autopilot", "vpa10", "vpa60", "escra-paper", "escra", "static15+batch", "escra+batch"}
)

// Quick is the default matrix of `make bench`: 18 s runs, 3 repetitions,
// a 6 s Burst cycle (three cycles a run), each policy on the cells that
// need it (Only):
//
//   - static15 and escra on every cell: every non-inferiority and slack
//     key, per cell and Table I's rows;
//   - autopilot on the plain cells: Table I's Autopilot row;
//   - static15mon, vpastatic (OffsetOnly) on the offset cells:
//     offset_escra_vs_static15mon_* and offset_escra_vs_vpastatic_*;
//   - of the frontier, the points that locate the budget ratio at
//     static15's p99.9 (offset_escra_budget_ratio_at_static15_p999):
//     static15, the point it is read at, and Escra at k = 1.5 (escra)
//     and 1 (escra-k100), between which the offline model puts the
//     crossing (docs/escra-policy.md: at k = 0.75 Escra is throttled in
//     6–17 % of periods against static's 51–56 %);
//   - static15+batch and escra+batch on QuickBatch: the batch keys.
//
// The full matrix keeps escra-paper, VPA, the rest of the frontier
// (static05, static075, static10, escra-k050, escra-k075), the +batch
// pair on every cell with a client, and Autopilot, escra-paper and the
// +batch pair on the offset cells.
func Quick() Config {
	plain, offset := QuickPlain, QuickOffset
	return Config{
		Workloads:  AllWorkloads,
		Loads:      append(append([]string{}, plain...), offset...),
		Policies:   quickPolicies,
		Duration:   18 * time.Second,
		Reps:       3,
		BurstCycle: 6 * time.Second,
		Only: map[string][]string{
			"autopilot":      plain,
			"static15+batch": QuickBatch,
			"escra+batch":    QuickBatch,
		},
	}
}

// Full is `make bench FULL=1`: every load and policy, 60 s runs, 3
// repetitions, the Escra paper's 20 s Burst cycle.
func Full() Config {
	return Config{
		Workloads: AllWorkloads,
		Loads:     []string{"fixed", "exp", "burst", "trace", "wrk", "redis-benchmark", "wave", "periodic", "shift"},
		Policies:  fullPolicies,
		Duration:  60 * time.Second,
		Reps:      3,
	}
}

// Name is a cell's "workload/load".
func (c Cell) Name() string { return c.Workload + "/" + c.Load }
