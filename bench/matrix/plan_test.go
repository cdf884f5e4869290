package matrix

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/internal/load"
)

// quickPlanMinutes is what the quick matrix must fit on an idle 2-core
// machine (docs/benchmarks.md, "What the quick matrix runs and why").
const quickPlanMinutes = 40

// The summary keys `make bench` is accepted on: Table I's rows against
// static15 over the cells that peak together, the offset cells' rows
// against the operators' baselines and the frontier's budget ratio, and
// the batch pair's.
var acceptanceKeys = []string{
	"escra_vs_static15_p999_latency_delta_pct_ci95_lo",
	"escra_vs_static15_throughput_delta_pct",
	"escra_vs_static15_cpu_slack_p50_delta_pct",
	"offset_escra_vs_static15mon_p999_latency_delta_pct_ci95_lo",
	"offset_escra_vs_vpastatic_p999_latency_delta_pct_ci95_lo",
	"offset_escra_budget_ratio_at_static15_p999",
	"escra_batch_cores_ratio",
	"escra_batch_vs_static15_batch_p999_latency_delta_pct_ci95_lo",
}

// The quick plan, as make bench runs it: Escra started, every cell profiled.
func quickPlan() Plan {
	c := Quick()
	c.OrderSeed = 1
	return c.Plan(PlanOptions{Escra: true})
}

func TestQuickPlanFits(t *testing.T) {
	p := quickPlan()
	if p.Minutes() > quickPlanMinutes {
		t.Errorf("the quick plan takes %.1f min, more than %d:\n%s", p.Minutes(), quickPlanMinutes, p.Table())
	}
	if c := Quick(); c.Reps < 3 {
		t.Errorf("the quick matrix runs %d repetitions, want at least 3", c.Reps)
	}
	// The plan is what Run does: one profiling run per cell, then
	// RunCount runs.
	c := Quick()
	if got, want := len(p.Runs), len(c.Cells())+c.RunCount(); got != want {
		t.Errorf("plan has %d runs, Profile and Run make %d", got, want)
	}
	t.Log("\n" + p.Table())
}

// resultsOf is a made-up results.json with one run per planned run, every
// figure present: the report's key producers (report.Summary) then say
// which keys the plan's runs can produce. Escra is a little better than
// every baseline, so the value-dependent keys (the frontier's budget
// ratio) are produced too; each repetition differs, so intervals exist.
func resultsOf(p Plan) *report.Results {
	r := &report.Results{Mode: "quick"}
	for _, cell := range p.cells {
		w, _ := WorkloadByName(cell.Workload)
		r.Budgets = append(r.Budgets, report.CellBudget{Workload: cell.Workload, Load: cell.Load, Static15LimitCores: 1, EscraBudgetCores: 1, Offset: w.Offset})
	}
	for _, pr := range p.Runs {
		if pr.Policy == ProfilePolicy {
			continue
		}
		w, _ := WorkloadByName(pr.Cell.Workload)
		base, batch := SplitBatch(pr.Policy)
		reserved, lat := 1.0, 100.0
		if IsEscra(base) {
			reserved, lat = FrontierK(base)/1.5, 80/FrontierK(base)*1.5
		} else if k, c, ok := staticRule(base, Peak{CPU: 1, CPUMon: 0.5, CPUP90: 0.4}); ok {
			reserved, lat = k*c/1.5, 100*1.5/(k*c)
		}
		jitter := 1 + 0.01*float64(pr.Rep)
		run := report.Run{Workload: pr.Cell.Workload, Load: pr.Cell.Load, Policy: pr.Policy, Rep: pr.Rep, DurationS: 18,
			ReservedCores: reserved, Periods: 180}
		if !w.NoClient {
			run.Client = load.Result{Requests: 1000, Successes: 1000, P50Us: 10 * lat * jitter, P99Us: 50 * lat * jitter, P999Us: 100 * lat * jitter,
				ThroughputRPS: 100 * jitter, DurationS: 18}
		}
		for i := range 10 {
			run.Slack = append(run.Slack, report.SlackSample{TMs: int64(i * 100), CPUCores: reserved * 0.5 * jitter, MemMiB: 10 * jitter})
		}
		if batch {
			run.BatchCores = (1 - reserved) * jitter
			if !IsEscra(base) {
				run.BatchCores = 0.1 * jitter
			}
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

// Every acceptance key has a producing run in the quick plan, found by
// the report's own key producers on made-up figures, and so does every
// per-cell comparison with static15 on the cells that peak together.
// For each key the test names the policies whose runs it needs.
func TestQuickPlanProducesTheAcceptanceKeys(t *testing.T) {
	p := quickPlan()
	s := report.Summary(resultsOf(p))
	var plain []Cell
	for _, cell := range p.cells {
		if w, _ := WorkloadByName(cell.Workload); !w.Offset {
			plain = append(plain, cell)
		}
	}
	if len(plain) == 0 {
		t.Fatal("the quick plan has no cell whose containers peak together")
	}
	want := slices.Clone(acceptanceKeys)
	for _, cell := range plain {
		w, _ := WorkloadByName(cell.Workload)
		pre := report.KeyName(cell.Workload) + "_" + report.KeyName(cell.Load) + "_escra_vs_static15_"
		want = append(want, pre+"cpu_slack_p50_delta_pct")
		if !w.NoClient {
			want = append(want, pre+"p999_latency_delta_pct_ci95_lo", pre+"throughput_delta_pct")
		}
	}
	for _, k := range want {
		if _, ok := s[k]; !ok {
			t.Errorf("no run of the quick plan produces %s", k)
		}
	}
	if reps, _ := s["reps"].(int); reps < 3 {
		t.Errorf("summary reps = %v, want at least 3 for every cell and policy", s["reps"])
	}
	// Which policies each acceptance key needs: the key is gone from the
	// summary of the plan without that policy's runs.
	var policies []string
	for _, r := range p.Runs {
		if r.Policy != ProfilePolicy && !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
	}
	needed := map[string]bool{}
	for _, pol := range policies {
		q := p
		q.Runs = slices.DeleteFunc(slices.Clone(p.Runs), func(r PlanRun) bool { return r.Policy == pol })
		sq := report.Summary(resultsOf(q))
		var lost []string
		for _, k := range acceptanceKeys {
			if _, ok := sq[k]; !ok {
				lost = append(lost, k)
			}
		}
		if len(lost) > 0 {
			needed[pol] = true
			t.Logf("%s: needed by %s", pol, strings.Join(lost, ", "))
		}
	}
	// Autopilot is Table I's other baseline, no acceptance key's; every
	// other policy of the quick plan runs because a key needs it.
	for _, pol := range policies {
		if !needed[pol] && pol != "autopilot" {
			t.Errorf("%s runs in the quick plan but no acceptance key needs it (docs/benchmarks.md, \"What the quick matrix runs and why\")", pol)
		}
	}
}

// The plan's estimate of one run: the duration, the per-run and
// per-container costs, the drain of a policy below the 1 s peak, the
// closed-loop tails; the table lists every cell.
func TestPlanEstimate(t *testing.T) {
	c := Config{Workloads: []string{"offset-pair", "nginx", "memwave"}, Loads: []string{"offset-pair/burst", "wrk", "wave"},
		Policies: []string{"static15", "vpastatic", "escra-k075", "static15+batch"}, Duration: 10 * time.Second, Reps: 2}
	for _, tc := range []struct {
		cell   Cell
		policy string
		want   float64
	}{
		{Cell{"offset-pair", "burst"}, "static15", 10 + PlanRunFixedS + 2*PlanReplicaS},
		{Cell{"offset-pair", "burst"}, "vpastatic", 10 + PlanRunFixedS + 2*PlanReplicaS + PlanDrainS},
		{Cell{"offset-pair", "burst"}, "escra-k075", 10 + PlanRunFixedS + 2*PlanReplicaS + PlanDrainS},
		{Cell{"offset-pair", "burst"}, ProfilePolicy, 10 + PlanRunFixedS + 2*PlanReplicaS},
		{Cell{"nginx", "wrk"}, "static15+batch", 10 + PlanRunFixedS + PlanReplicaS + PlanBatchS},
		{Cell{"memwave", "wave"}, "vpastatic", 10 + PlanRunFixedS + PlanReplicaS},
	} {
		if got := c.runSeconds(tc.cell, tc.policy); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", tc.want) {
			t.Errorf("%s %s: %.2f s, want %.2f", tc.cell.Name(), tc.policy, got, tc.want)
		}
	}
	p := c.Plan(PlanOptions{})
	// 3 profiling runs; per repetition offset-pair runs static15,
	// vpastatic and static15+batch (escra-k075 is skipped without Escra),
	// nginx/wrk static15 and static15+batch (vpastatic and the frontier
	// run on offset cells only), memwave static15 (no batch without a
	// client).
	escra := 0
	for _, r := range p.Runs {
		if IsEscra(r.Policy) {
			escra++
		}
	}
	if escra != 0 || p.Profiling() != 3 || len(p.Runs) != 3+2*(3+2+1) {
		t.Errorf("plan without Escra: %d runs, %d profiling, %d Escra:\n%s", len(p.Runs), p.Profiling(), escra, p.Table())
	}
	if q := c.Plan(PlanOptions{Profiled: true}); q.Profiling() != 0 {
		t.Errorf("plan with earlier profiles has %d profiling runs", q.Profiling())
	}
	for _, cell := range c.Cells() {
		if !strings.Contains(p.Table(), cell.Name()) {
			t.Errorf("plan table lacks %s:\n%s", cell.Name(), p.Table())
		}
	}
}
