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

// pctCell formats a percentage, "undefined" where the baseline is zero.
func pctCell(v float64) string {
	if math.IsNaN(v) {
		return "undefined"
	}
	return fmt.Sprintf("%.1f %%", v)
}

// pctCI formats "x % [lo, hi]", the interval left off where there is none.
func pctCI(v, lo, hi float64) string {
	if math.IsNaN(v) || math.IsNaN(lo) || math.IsNaN(hi) {
		return pctCell(v)
	}
	return fmt.Sprintf("%.1f %% [%.1f, %.1f]", v, lo, hi)
}

// diffCell formats escra − baseline in the report's units (latency in ms).
func diffCell(m Metric, v float64) string {
	switch m.Unit {
	case "us":
		return fmt.Sprintf("%+.2f ms", v/1000)
	case "rps":
		return fmt.Sprintf("%+.1f req/s", v)
	case "cores":
		return fmt.Sprintf("%+.3f cores", v)
	case "mib":
		return fmt.Sprintf("%+.1f MiB", v)
	}
	return fmt.Sprintf("%+.4g %s", v, m.Unit)
}

func rowName(escra, baseline string) string {
	if escra != "escra" {
		return baseline + " (" + escra + ")"
	}
	return baseline
}

// Markdown renders the report text.
func Markdown(r *Results, aggs map[Key]*Agg, ds []Delta, pf plotFiles) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Escra against its peers (%s run)\n\n", r.Mode)
	w("Machine %s: %d CPUs, %.1f GiB, kernel %s, Docker %s, %s. Commit %s, %s.\n\n",
		r.Machine.Hostname, r.Machine.CPUs, float64(r.Machine.MemBytes)/(1<<30), r.Machine.Kernel, r.Machine.Docker, r.Machine.Go, r.Commit, r.Date)
	w("Every figure below comes from this run (`results.json` beside this file). ")
	w("Escra §VI ran on three 20-core workers with the load generator elsewhere; here everything shares one %d-CPU machine, ", r.Machine.CPUs)
	if r.Pinning.ClientCPUs != "" && r.Pinning.AppCPUs != "" {
		w("the client pinned to CPUs %s and the app under test to CPUs %s (see Fairness), ", r.Pinning.ClientCPUs, r.Pinning.AppCPUs)
	} else {
		w("unpinned, so client latency includes contention with the client itself, ")
	}
	w("and rates are scaled down accordingly. Latency deltas are reductions, throughput deltas increases ")
	w("and slack deltas reductions, all in %% of the baseline: **positive means Escra did better**.\n\n")
	w("How the figures are made:\n\n")
	w("- Within each repetition the policies of a cell run one after another in a random order, so drift of the machine spreads over all of them")
	ordered := false
	for _, run := range r.Runs {
		ordered = ordered || run.Order != 0
	}
	if !ordered {
		w(" (this results.json records no run order)")
	}
	w(".\n")
	w("- Per-cell figures are means over repetitions ± the 95 %% half-width (Student t). Fewest repetitions of any cell and policy: %d.\n", minReps(aggs))
	w("- Every delta comes with its 95 %% interval, `x %% [lo, hi]`: percentile bootstrap over repetitions (%d resamples, Escra's and the baseline's repetitions resampled independently, fixed seed, so the report is reproducible). ", BootstrapResamples)
	w("A cell with fewer than two repetitions on a side has no interval.\n")
	w("- No cell is dropped. A small baseline figure gives a large percentage and it counts; only where the baseline's figure is zero is the percentage undefined, and there the absolute difference (Escra − baseline) is reported instead and the cell is tallied as undefined.\n")
	w("- Beside the arithmetic mean of the percentages, Table I gives the geometric mean over cells of the ratio Escra/baseline, which a few huge percentages cannot dominate.\n")
	w("- Latency percentiles count every request, failed ones with the time until they failed: a timeout counts 5 s, ")
	w("but a refused connection (a server restarting after an OOM kill) fails fast, so read latency together with ")
	w("throughput and failed requests.\n\n")
	for _, n := range r.Notes {
		w("- %s\n", n)
	}
	if len(r.Notes) > 0 {
		w("\n")
	}

	writeFairness(w, r, aggs)
	writeFrontier(w, Frontiers(r, aggs), pf.Frontier)

	rows := TableI(withoutOffset(r, ds))
	if len(rows) > 0 {
		w("## Table I analogue: average over workloads and loads\n\n")
		if len(OffsetCells(r)) > 0 {
			w("Over the cells whose containers peak together; the cells whose containers peak apart are averaged apart (`offset_` keys in summary.json) and have the frontier section.\n\n")
		}
		w("Arithmetic mean over cells of the per-cell percentages, with its 95 %% bootstrap interval (each resample resamples the repetitions of both sides in every cell and recomputes the mean over cells).\n\n")
		w("| Escra vs | cells (with a client) |")
		for _, m := range Metrics {
			w(" Δ %s |", m.Label)
		}
		w("\n|---|---|%s\n", strings.Repeat("---|", NumMetrics))
		for _, row := range rows {
			w("| %s | %d (%d) |", rowName(row.Escra, row.Baseline), row.Cells, row.ClientCells)
			v := row.Avg.values()
			for j, m := range Metrics {
				if m.Client && row.ClientCells == 0 {
					w(" — |")
					continue
				}
				w(" %s |", pctCI(v[j], row.Avg.Lo[j], row.Avg.Hi[j]))
			}
			w("\n")
		}
		w("\nGeometric mean over cells of Escra/baseline (below 1 is better for latency and slack, above 1 for throughput); in brackets the cells left out of it:\n\n")
		w("| Escra vs |")
		for _, m := range Metrics {
			w(" %s |", m.Label)
		}
		w("\n|---|%s\n", strings.Repeat("---|", NumMetrics))
		excluded := false
		for _, row := range rows {
			w("| %s |", rowName(row.Escra, row.Baseline))
			for j, m := range Metrics {
				switch {
				case m.Client && row.ClientCells == 0:
					w(" — |")
				case math.IsNaN(row.GeoMean[j]):
					w(" none (%d) |", row.GeoExcluded[j])
				default:
					w(" %.3f (%d) |", row.GeoMean[j], row.GeoExcluded[j])
				}
				excluded = excluded || row.GeoExcluded[j] > 0
			}
			w("\n")
		}
		w("\n")
		w("A cell is left out of a geometric mean where its ratio is undefined or not positive (a figure of zero or below on either side, e.g. a slack of exactly 0)")
		if !excluded {
			w("; here none is")
		}
		w(". That exclusion is for the geometric mean only: the arithmetic mean of percentages includes every cell, except where the baseline's figure is zero and the percentage undefined.")
		var undef []string
		for _, row := range rows {
			for j, m := range Metrics {
				if row.Undefined[j] > 0 {
					undef = append(undef, fmt.Sprintf("%s vs %s, %s: %d (mean difference over all cells %s)",
						row.Escra, row.Baseline, m.Label, row.Undefined[j], diffCell(m, row.Avg.Diff[j])))
				}
			}
		}
		if len(undef) > 0 {
			w(" Cells with an undefined percentage (baseline figure zero), counted in the mean differences in summary.json: %s.", strings.Join(undef, "; "))
		} else {
			w(" No percentage is undefined.")
		}
		w("\n\nEscra Table I for comparison (Static 1.5× vs Escra: 38.0 %% latency, 25.4 %% throughput, 81.3/74.2 %% CPU slack, 55.0/95.9 %% memory slack; Autopilot vs Escra: 36.1 %%, 54.5 %%, 78.3/78.6 %%, 26.7/68.9 %%).\n\n")
		writeLosses(w, ds)
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
		w("## Change in p99.9 latency and throughput (like Escra Fig. 4)\n\n")
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
		w("| policy | reps | p50 latency (ms) | p99 (ms) | p99.9 (ms) | throughput (req/s) | failed requests | CPU slack p50/p99 (cores) | mem slack p50/p99 (MiB) | throttled periods (%%) / time (ms) | OOM kills | limit changes/s | controller CPU %% | daemon CPU %% | reserved (cores) | batch (cores) | client CPUs busy / client itself (cores) |\n")
		w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range pols {
			a := aggs[Key{c, p}]
			if a == nil {
				continue
			}
			ms := func(s Stat) Stat { return Stat{Mean: s.Mean / 1000, CI95: s.CI95 / 1000, N: s.N} }
			w("| %s | %d | %s | %s | %s | %s | %.0f | %.3f / %.3f | %.1f / %.1f | %.0f (%.1f %%) / %.0f | %.1f | %.2f | %.1f | %.1f | %s | %s | %.2f / %.2f |\n",
				p, a.Runs, ci(ms(a.P50Us), "%.2f"), ci(ms(a.P99Us), "%.2f"), ci(ms(a.P999Us), "%.2f"),
				ci(a.ThroughputRPS, "%.1f"), a.Errors.Mean, a.CPUSlackP50.Mean, a.CPUSlackP99.Mean, a.MemSlackP50.Mean, a.MemSlackP99.Mean,
				a.ThrottledPeriods.Mean, 100*a.ThrottledFrac.Mean, a.ThrottledMs.Mean, a.OOMKills.Mean, a.LimitChangesPerS.Mean,
				a.ControllerCPUPct.Mean, a.DaemonCPUPct.Mean, ci(a.ReservedCores, "%.2f"), ci(a.BatchCores, "%.2f"),
				a.ClientCPUCores.Mean, a.ClientSelfCores.Mean)
		}
		w("\n")
		writeCellDeltas(w, c, ds)
		if f := pf.CPUCDF[c]; f != "" {
			w("![CPU slack CDF](%s) ", f)
		}
		if f := pf.MemCDF[c]; f != "" {
			w("![memory slack CDF](%s)", f)
		}
		w("\n\n")
		for _, p := range pols {
			if f := pf.Series[Key{c, p}]; f != "" {
				w("<details><summary>limit vs usage under %s (like Escra Fig. 2)</summary>\n\n![%s](%s)\n\n</details>\n\n", p, p, f)
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
