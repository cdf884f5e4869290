package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Generate writes dir/report.md, dir/summary.json and dir/plots/*.png.
func Generate(r *Results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	aggs := Aggregate(r)
	ds := Deltas(aggs)
	pf := plotAll(r, aggs, ds, dir)
	sum, err := json.MarshalIndent(Summary(r), "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(sum, '\n'), 0o644); err != nil {
		return err
	}
	md := Markdown(r, aggs, ds, pf)
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}

func ci(s Stat, format string) string {
	v := fmt.Sprintf(format, s.Mean)
	if s.N > 1 {
		v += " ± " + fmt.Sprintf(format, s.CI95)
	}
	return v
}

// Markdown renders the report text.
// pctCell formats a delta, "—" when it has none (noise floor).
func pctCell(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", v)
}

func Markdown(r *Results, aggs map[Key]*Agg, ds []Delta, pf plotFiles) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Escra against its peers (%s run)\n\n", r.Mode)
	w("Machine %s: %d CPUs, %.1f GiB, kernel %s, Docker %s, %s. Commit %s, %s.\n\n",
		r.Machine.Hostname, r.Machine.CPUs, float64(r.Machine.MemBytes)/(1<<30), r.Machine.Kernel, r.Machine.Docker, r.Machine.Go, r.Commit, r.Date)
	w("Every figure below comes from this run (`results.json` beside this file). ")
	w("Seed 000 §VI ran on three 20-core workers with the load generator elsewhere; here the load generator, ")
	w("the workloads, the daemon and the controller share %d cores, so client latency includes contention with the ", r.Machine.CPUs)
	w("client itself, and rates are scaled down accordingly. Latency deltas are reductions, throughput deltas increases ")
	w("and slack deltas reductions, all in %% of the baseline: **positive means Escra did better**. ")
	w("With several repetitions, figures are means ± the 95 %% confidence half-width (Student t). ")
	w("Latency percentiles count every request, failed ones with the time until they failed: a timeout counts 5 s, ")
	w("but a refused connection (a server restarting after an OOM kill) fails fast, so read latency together with ")
	w("throughput and failed requests.\n\n")
	for _, n := range r.Notes {
		w("- %s\n", n)
	}
	if len(r.Notes) > 0 {
		w("\n")
	}

	rows := TableI(ds)
	if len(rows) > 0 {
		w("## Table I analogue: average over workloads and loads\n\n")
		w("| Escra vs | cells (with a client) | Δ p99.9 latency | Δ p99 latency | Δ throughput | Δ p50 CPU slack | Δ p99 CPU slack | Δ p50 mem slack | Δ p99 mem slack |\n")
		w("|---|---|---|---|---|---|---|---|---|\n")
		for _, row := range rows {
			a := row.Avg
			name := row.Baseline
			if row.Escra != "escra" {
				name += " (" + row.Escra + ")"
			}
			w("| %s | %d (%d) |", name, row.Cells, row.ClientCells)
			for _, v := range a.values() {
				w(" %s |", pctCell(v))
			}
			w("\n")
		}
		w("\nEvery cell counts; a percentage is undefined only where the baseline's figure is zero.")
		for _, row := range rows {
			n := 0
			for _, u := range row.Undefined {
				n += u
			}
			if n > 0 {
				w(" Against %s, %d figures undefined.", row.Baseline, n)
			}
		}
		w("\n")
		w("\nSeed 000 Table I for comparison (Static 1.5× vs Escra: 38.0 %% latency, 25.4 %% throughput, 81.3/74.2 %% CPU slack, 55.0/95.9 %% memory slack; Autopilot vs Escra: 36.1 %%, 54.5 %%, 78.3/78.6 %%, 26.7/68.9 %%).\n\n")
	}

	w("## OOM kills per policy\n\n| policy | OOM kills (all runs) |\n|---|---|\n")
	oom := map[string]float64{}
	for k, a := range aggs {
		oom[k.Policy] += a.OOMKills.Mean * float64(a.OOMKills.N)
	}
	for _, p := range Policies(aggs) {
		w("| %s | %.0f |\n", p, oom[p])
	}
	w("\n")

	if len(pf.Deltas) > 0 {
		w("## Change in p99.9 latency and throughput (like seed 000 Fig. 4)\n\n")
		var bs []string
		for bl := range pf.Deltas {
			bs = append(bs, bl)
		}
		sort.Slice(bs, func(i, j int) bool { return policyRank(bs[i]) < policyRank(bs[j]) })
		for _, bl := range bs {
			w("![Escra vs %s](%s)\n\n", bl, pf.Deltas[bl])
		}
	}

	pols := Policies(aggs)
	for _, c := range Cells(aggs) {
		w("## %s, %s load\n\n", c.Workload, c.Load)
		w("| policy | reps | p50 latency (ms) | p99 (ms) | p99.9 (ms) | throughput (req/s) | failed requests | CPU slack p50/p99 (cores) | mem slack p50/p99 (MiB) | throttled periods (%%) | OOM kills | limit changes/s | controller CPU %% | daemon CPU %% |\n")
		w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range pols {
			a := aggs[Key{c, p}]
			if a == nil {
				continue
			}
			ms := func(s Stat) Stat { return Stat{Mean: s.Mean / 1000, CI95: s.CI95 / 1000, N: s.N} }
			w("| %s | %d | %s | %s | %s | %s | %.0f | %.3f / %.3f | %.1f / %.1f | %.0f (%.1f %%) | %.1f | %.2f | %.1f | %.1f |\n",
				p, a.P999Us.N, ci(ms(a.P50Us), "%.2f"), ci(ms(a.P99Us), "%.2f"), ci(ms(a.P999Us), "%.2f"),
				ci(a.ThroughputRPS, "%.1f"), a.Errors.Mean, a.CPUSlackP50.Mean, a.CPUSlackP99.Mean, a.MemSlackP50.Mean, a.MemSlackP99.Mean,
				a.ThrottledPeriods.Mean, 100*a.ThrottledFrac.Mean, a.OOMKills.Mean, a.LimitChangesPerS.Mean,
				a.ControllerCPUPct.Mean, a.DaemonCPUPct.Mean)
		}
		w("\n")
		if f := pf.CPUCDF[c]; f != "" {
			w("![CPU slack CDF](%s) ", f)
		}
		if f := pf.MemCDF[c]; f != "" {
			w("![memory slack CDF](%s)", f)
		}
		w("\n\n")
		for _, p := range pols {
			if f := pf.Series[Key{c, p}]; f != "" {
				w("<details><summary>limit vs usage under %s (like seed 000 Fig. 2)</summary>\n\n![%s](%s)\n\n</details>\n\n", p, p, f)
			}
		}
	}

	if len(r.Overheads) > 0 {
		w("## Overheads (component benchmarks)\n\n| figure | value |\n|---|---|\n")
		var ks []string
		for k := range r.Overheads {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			w("| %s | %.4g |\n", k, r.Overheads[k])
		}
		w("\n")
	}
	if len(pf.Failures) > 0 {
		w("## Plots that could not be drawn\n\n")
		for _, f := range pf.Failures {
			w("- %s\n", f)
		}
	}
	return b.String()
}
