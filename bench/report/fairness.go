package report

import (
	"fmt"
	"math"
	"strings"
)

// budgetTolerance: budgets are computed, not measured; anything beyond
// rounding is a difference the report must name.
const budgetTolerance = 1e-6 // cores

// minReps is the fewest repetitions of any (cell, policy) that ran.
func minReps(aggs map[Key]*Agg) int {
	n := 0
	for _, a := range aggs {
		if n == 0 || a.Runs < n {
			n = a.Runs
		}
	}
	return n
}

// writeFairness lists what each side was given: budgets, pinning, and
// what the freed capacity and the client got.
func writeFairness(w func(string, ...any), r *Results, aggs map[Key]*Agg) {
	w("## Fairness\n\n")
	p := r.Pinning
	if p.ClientCPUs == "" && p.AppCPUs == "" && p.EscraCPUs == "" {
		w("Pinning: not recorded.\n\n")
	} else {
		w("Pinning: client (bench-run and the load tools) on CPUs %q, app containers and the batch container on %q, escrad and escra-controller on %q.\n\n",
			p.ClientCPUs, p.AppCPUs, p.EscraCPUs)
	}
	budget := map[Cell]CellBudget{}
	if len(r.Budgets) > 0 {
		w("Escra's app budget must equal the sum of the static15 limits of the cell.\n\n")
		w("| cell | Escra budget (cores) | Σ static15 limits (cores) | difference |\n|---|---|---|---|\n")
		for _, cb := range r.Budgets {
			budget[Cell{cb.Workload, cb.Load}] = cb
			w("| %s/%s | %.3f | %.3f | %+.3f |\n", cb.Workload, cb.Load, cb.EscraBudgetCores, cb.Static15LimitCores, cb.EscraBudgetCores-cb.Static15LimitCores)
		}
		w("\n")
		for _, cb := range r.Budgets {
			if d := cb.EscraBudgetCores - cb.Static15LimitCores; math.Abs(d) > budgetTolerance {
				w("UNFAIR: %s/%s: Escra's budget %.3f cores ≠ Σ static15 limits %.3f cores (%+.3f).\n\n",
					cb.Workload, cb.Load, cb.EscraBudgetCores, cb.Static15LimitCores, d)
			}
		}
	}
	var missing []string
	for _, c := range Cells(aggs) {
		if _, ok := budget[c]; !ok {
			missing = append(missing, c.Workload+"/"+c.Load)
		}
	}
	if len(missing) > 0 {
		w("No budget recorded for: %s.\n\n", strings.Join(missing, ", "))
	}
	w("Per policy, means over cells: the CPU held for the app (Σ limits; Escra's whole budget), what the co-located best-effort batch container got (the capacity a policy frees), and how busy the client's CPUs were (all processes / the client's own). Per-cell values are in the cell tables below.\n\n")
	w("| policy | cells | reserved (cores) | batch container (cores) | client CPUs busy (cores) | client itself (cores) |\n|---|---|---|---|---|---|\n")
	batch := BatchCoresMean(aggs)
	for _, pol := range Policies(aggs) {
		var res, cpu, self float64
		n := 0
		for k, a := range aggs {
			if k.Policy == pol {
				res, cpu, self = res+a.ReservedCores.Mean, cpu+a.ClientCPUCores.Mean, self+a.ClientSelfCores.Mean
				n++
			}
		}
		w("| %s | %d | %.3f | %.3f | %.3f | %.3f |\n", pol, n, res/float64(n), batch[pol], cpu/float64(n), self/float64(n))
	}
	w("\n")
}

// writeLosses names, for every Escra policy, the cells where its p99.9
// latency was worse than static15's.
func writeLosses(w func(string, ...any), ds []Delta) {
	w("## Where Escra's p99.9 latency is worse than static15's\n\n")
	var pols []string
	lost := map[string][]string{}
	for _, d := range ds {
		if d.Baseline != "static15" || !d.HasClient {
			continue
		}
		if _, ok := lost[d.Escra]; !ok {
			pols = append(pols, d.Escra)
			lost[d.Escra] = nil
		}
		if v := d.P999Latency; v < 0 || (math.IsNaN(v) && d.Diff[0] > 0) {
			e, b := d.means(0)
			lost[d.Escra] = append(lost[d.Escra], fmt.Sprintf("- %s vs static15, %s/%s: %.2f ms against %.2f ms, %s (%s).\n",
				d.Escra, d.Workload, d.Load, e/1000, b/1000, pctCI(v, d.Lo[0], d.Hi[0]), diffCell(Metrics[0], d.Diff[0])))
		}
	}
	if len(pols) == 0 {
		w("No cell has both an Escra policy and static15 with a client.\n\n")
		return
	}
	for _, p := range pols {
		if len(lost[p]) == 0 {
			w("- %s vs static15: worse in no cell.\n", p)
		}
		for _, l := range lost[p] {
			w("%s", l)
		}
	}
	w("\n")
}

// writeCellDeltas is a cell's deltas of every Escra policy against every
// baseline: percentage with its interval, and the absolute difference.
func writeCellDeltas(w func(string, ...any), c Cell, ds []Delta) {
	var mine []Delta
	for _, d := range ds {
		if d.Cell == c {
			mine = append(mine, d)
		}
	}
	if len(mine) == 0 {
		return
	}
	w("Deltas: %% of the baseline (positive = Escra better) [95 %% bootstrap interval]; after the semicolon Escra − baseline.\n\n")
	w("| Escra vs |")
	for _, m := range Metrics {
		w(" Δ %s |", m.Label)
	}
	w("\n|---|%s\n", strings.Repeat("---|", NumMetrics))
	for _, d := range mine {
		w("| %s |", rowName(d.Escra, d.Baseline))
		v := d.values()
		for j, m := range Metrics {
			if m.Client && !d.HasClient {
				w(" — |")
				continue
			}
			w(" %s; %s |", pctCI(v[j], d.Lo[j], d.Hi[j]), diffCell(m, d.Diff[j]))
		}
		w("\n")
	}
	w("\n")
}
