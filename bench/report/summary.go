package report

import (
	"math"
	"strings"
)

// KeyName makes a summary key part: lower case, [a-z0-9_] only.
func KeyName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Summary is the flat summary.json: every figure of the report, keyed by
// workload, load and policy, with units in the names; plus the machine,
// kernel, commit and date. Latency deltas are reductions, throughput
// deltas increases, slack deltas reductions: positive means Escra better.
// Each delta has its bootstrap interval (_ci95_lo/_hi) and the absolute
// difference escra − baseline (_diff_<unit>); Table I rows add the
// geometric mean of escra/baseline ratios and the cells it leaves out.
func Summary(r *Results) map[string]any {
	s := map[string]any{
		"machine_hostname":    r.Machine.Hostname,
		"machine_cpus":        r.Machine.CPUs,
		"machine_mem_bytes":   r.Machine.MemBytes,
		"kernel":              r.Machine.Kernel,
		"go_version":          r.Machine.Go,
		"docker_version":      r.Machine.Docker,
		"commit":              r.Commit,
		"date":                r.Date,
		"mode":                r.Mode,
		"runs":                len(r.Runs),
		"pinning_client_cpus": r.Pinning.ClientCPUs,
		"pinning_app_cpus":    r.Pinning.AppCPUs,
		"pinning_escra_cpus":  r.Pinning.EscraCPUs,
	}
	for _, cb := range r.Budgets {
		c := KeyName(cb.Workload) + "_" + KeyName(cb.Load) + "_"
		s[c+"escra_budget_cores"] = cb.EscraBudgetCores
		s[c+"static15_limit_cores"] = cb.Static15LimitCores
	}
	aggs := Aggregate(r)
	oom := map[string]float64{}
	for k, a := range aggs {
		p := KeyName(k.Workload) + "_" + KeyName(k.Load) + "_" + KeyName(k.Policy) + "_"
		s[p+"reps"] = a.Runs
		s[p+"p50_latency_us"] = a.P50Us.Mean
		s[p+"p99_latency_us"] = a.P99Us.Mean
		s[p+"p999_latency_us"] = a.P999Us.Mean
		s[p+"throughput_rps"] = a.ThroughputRPS.Mean
		s[p+"failed_requests"] = a.Errors.Mean
		if a.P999Us.N > 1 {
			s[p+"p999_latency_us_ci95"] = a.P999Us.CI95
			s[p+"throughput_rps_ci95"] = a.ThroughputRPS.CI95
		}
		s[p+"cpu_slack_p50_cores"] = a.CPUSlackP50.Mean
		s[p+"cpu_slack_p99_cores"] = a.CPUSlackP99.Mean
		s[p+"mem_slack_p50_mib"] = a.MemSlackP50.Mean
		s[p+"mem_slack_p99_mib"] = a.MemSlackP99.Mean
		s[p+"throttled_periods"] = a.ThrottledPeriods.Mean
		s[p+"throttled_pct"] = 100 * a.ThrottledFrac.Mean
		s[p+"throttled_ms"] = a.ThrottledMs.Mean
		s[p+"oom_kills"] = a.OOMKills.Mean
		s[p+"limit_changes_per_s"] = a.LimitChangesPerS.Mean
		s[p+"controller_cpu_pct"] = a.ControllerCPUPct.Mean
		s[p+"daemon_cpu_pct"] = a.DaemonCPUPct.Mean
		s[p+"reserved_cores"] = a.ReservedCores.Mean
		s[p+"batch_cores"] = a.BatchCores.Mean
		s[p+"client_cpu_cores"] = a.ClientCPUCores.Mean
		s[p+"client_self_cores"] = a.ClientSelfCores.Mean
		oom[k.Policy] += a.OOMKills.Mean * float64(a.OOMKills.N)
	}
	// The fewest repetitions of any (cell, policy): what the acceptance criterion
	// "at least 3 repetitions" is checked against.
	s["reps"] = minReps(aggs)
	s["cfs_burst"] = r.CFSBurst
	for p, v := range BatchCoresMean(aggs) {
		s[KeyName(p)+"_batch_cores_mean"] = v
	}
	for p, n := range oom {
		s[KeyName(p)+"_oom_kills_total"] = n
	}
	// putDelta writes a Delta's percentages, CIs and differences; NaN
	// (undefined, and not JSON) is left out. Cells without a client have
	// no latency or throughput figures.
	putDelta := func(prefix string, d Delta) {
		for i, m := range Metrics {
			if m.Client && !d.HasClient {
				continue
			}
			put := func(k string, v float64) {
				if !math.IsNaN(v) {
					s[prefix+m.Name+k] = v
				}
			}
			put("_delta_pct", d.values()[i])
			put("_delta_pct_ci95_lo", d.Lo[i])
			put("_delta_pct_ci95_hi", d.Hi[i])
			put("_diff_"+m.Unit, d.Diff[i])
		}
	}
	ds := Deltas(aggs)
	for _, d := range ds {
		putDelta(KeyName(d.Workload)+"_"+KeyName(d.Load)+"_"+KeyName(d.Escra)+"_vs_"+KeyName(d.Baseline)+"_", d)
	}
	for _, row := range TableI(withoutOffset(r, ds)) {
		p := KeyName(row.Escra) + "_vs_" + KeyName(row.Baseline) + "_"
		row.Avg.HasClient = row.ClientCells > 0
		putDelta(p, row.Avg)
		s[p+"cells"] = row.Cells
		for i, m := range Metrics {
			if m.Client && row.ClientCells == 0 {
				continue
			}
			if !math.IsNaN(row.GeoMean[i]) {
				s[p+m.Name+"_geomean_ratio"] = row.GeoMean[i]
			}
			s[p+m.Name+"_geomean_excluded"] = row.GeoExcluded[i]
			s[p+m.Name+"_delta_pct_undefined"] = row.Undefined[i]
		}
	}
	frontierSummary(s, r, aggs, ds, putDelta)
	for k, v := range r.Overheads {
		s["overhead_"+KeyName(k)] = v
	}
	return s
}
