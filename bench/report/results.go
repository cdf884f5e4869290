// Package report turns the results of a benchmark run (results.json, the
// Results struct below) into the Markdown report, the PNG plots and the flat
// summary.json: Escra Fig. 2 (limit vs usage), Fig. 4 (Δ
// latency and throughput vs each baseline), Fig. 5–6 (CPU and memory slack
// CDFs) and Table I (average improvement and slack reduction).
package report

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/escra-dev/escra/internal/load"
)

// Results is everything one benchmark run measured.
type Results struct {
	Machine Machine `json:"machine"`
	Commit  string  `json:"commit"`
	Date    string  `json:"date"` // RFC 3339
	Mode    string  `json:"mode"` // "quick" or "full"
	// Notes are caveats the driver wants in the report (e.g. "kernel backend skipped: no VM").
	Notes []string `json:"notes,omitempty"`
	Runs  []Run    `json:"runs"`
	// Overheads are flat figures from the component benchmarks (limit apply
	// latency, OOM rescue round trip, containers per core, ...), keys with units.
	Overheads map[string]float64 `json:"overheads,omitempty"`
	// Budgets are the per-cell provisioning figures the fairness rules
	// compare: Escra's app budget must equal Σ static15 limits of that cell.
	Budgets []CellBudget `json:"budgets,omitempty"`
	// Pinning says which CPUs the client and the app under test ran on.
	Pinning Pinning `json:"pinning"`
	// CFSBurst is the CFS burst every policy's containers ran with, as a
	// share of their quota (bench-run -burst; 0: none).
	CFSBurst float64 `json:"cfs_burst,omitempty"`
	// OrderSeed is the seed of the policies' order (bench-run
	// -order-seed): the same value replays the same order.
	OrderSeed int64 `json:"order_seed,omitempty"`
}

// CellBudget is the CPU provisioned for one (workload, load) by each side.
type CellBudget struct {
	Workload           string  `json:"workload"`
	Load               string  `json:"load"`
	Static15LimitCores float64 `json:"static15_limit_cores"` // Σ over replicas of 1.5 × peak (capped at the app's CPUs)
	EscraBudgetCores   float64 `json:"escra_budget_cores"`   // Ω of the cell's Escra apps
	// Offset: the cell's containers peak apart (the frontier cells);
	// the report keeps them apart from the cells that peak together.
	Offset bool `json:"offset,omitempty"`
	// OracleShare (offset cells): the least share of Static15LimitCores
	// at which a clairvoyant allocator, moving budget between the
	// containers every period, serves each as static15 does (bench/replay).
	OracleShare float64 `json:"oracle_share,omitempty"`
}

// Pinning is the CPU placement of the benchmark's parts (cpuset lists).
type Pinning struct {
	ClientCPUs string `json:"client_cpus"` // bench-run, vegeta, wrk, redis-benchmark
	AppCPUs    string `json:"app_cpus"`    // the containers under test and the batch container
	EscraCPUs  string `json:"escra_cpus"`  // escrad and escra-controller
}

type Machine struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	MemBytes uint64 `json:"mem_bytes"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Docker   string `json:"docker"`
}

// Run is one (workload, load, policy, repetition).
type Run struct {
	Workload string `json:"workload"` // demo-http, nginx, redis, memwave, ...
	Load     string `json:"load"`     // fixed, exp, burst, trace, wrk, redis-benchmark
	Policy   string `json:"policy"`   // escra, escra-kernel, static15, static10, static075, autopilot, vpa60, vpa10
	Rep      int    `json:"rep"`

	Client    load.Result `json:"client"`
	DurationS float64     `json:"duration_s"`
	// WallS is the run's wall-clock from creating its containers to
	// removing them: what bench/matrix's plan estimates.
	WallS float64 `json:"wall_s,omitempty"`

	// Slack summed over the run's containers, sampled every 100 ms.
	Slack []SlackSample `json:"slack"`
	// Limit and usage of one container (SeriesContainer), every 100 ms.
	SeriesContainer string        `json:"series_container,omitempty"`
	Series          []SeriesPoint `json:"series,omitempty"`

	ThrottledPeriods int64 `json:"throttled_periods"` // Δ cpu.stat nr_throttled, summed over containers
	Periods          int64 `json:"periods"`           // Δ cpu.stat nr_periods
	// ThrottledMs is Δ cpu.stat throttled time summed over containers: it
	// also counts throttles that a quota raise ended within the period,
	// which nr_throttled misses (the kernel counts a period as throttled
	// only if it is still throttled when the period timer fires).
	ThrottledMs  float64 `json:"throttled_ms"`
	OOMKills     int     `json:"oom_kills"`
	LimitChanges int     `json:"limit_changes"` // limit writes applied (CPU or memory)

	// CPU time of the policy's processes over the run (controller/recommender and daemon).
	ControllerCPUSeconds float64 `json:"controller_cpu_s"`
	DaemonCPUSeconds     float64 `json:"daemon_cpu_s"`

	// Order is the run's position in its repetition (policies run in a
	// random order per repetition and cell).
	Order int `json:"order"`
	// ReservedCores is the mean over the run of the CPU the app holds:
	// Σ container limits for the baselines, the app budget Ω for Escra
	// (its unassigned pool is reserved for the app, not free).
	ReservedCores float64 `json:"reserved_cores"`
	// BatchCores is the mean CPU a co-located best-effort batch container
	// got; its quota is the app CPUs minus Σ the app's container limits,
	// updated every 100 ms: what the capacity a policy frees buys.
	BatchCores float64 `json:"batch_cores"`
	// ClientCPUCores is the mean CPU the client's CPUs were busy (all
	// processes on them) during the run; ClientSelfCores what the client
	// processes themselves used.
	ClientCPUCores  float64 `json:"client_cpu_cores"`
	ClientSelfCores float64 `json:"client_self_cores"`
}

type SlackSample struct {
	TMs      int64   `json:"t_ms"`
	CPUCores float64 `json:"cpu_cores"` // limit − usage
	MemMiB   float64 `json:"mem_mib"`
}

type SeriesPoint struct {
	TMs         int64   `json:"t_ms"`
	CPULimit    float64 `json:"cpu_limit_cores"`
	CPUUsage    float64 `json:"cpu_usage_cores"`
	MemLimitMiB float64 `json:"mem_limit_mib"`
	MemUsageMiB float64 `json:"mem_usage_mib"`
}

// Load reads a results JSON file.
func Load(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", path)
	}
	for i, run := range r.Runs {
		if run.Workload == "" || run.Load == "" || run.Policy == "" {
			return nil, fmt.Errorf("%s: run %d lacks workload, load or policy", path, i)
		}
	}
	return &r, nil
}

// Save writes r as indented JSON.
func (r *Results) Save(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
