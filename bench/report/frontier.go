package report

import (
	"math"
	"sort"
)

// The latency–reservation frontier (Escra §VI-C: the win of moving one
// app's budget between its containers is less latency for the same
// reserved CPU, or the same latency for less): per offset cell, p99.9
// against reserved cores for static at k × the 1 s peak and for Escra
// with exactly the same totals.

// frontierStatic and frontierEscra name the frontier's policies by k.
var (
	frontierStatic = map[string]float64{"static05": 0.5, "static075": 0.75, "static10": 1, "static15": 1.5}
	frontierEscra  = map[string]float64{"escra-k050": 0.5, "escra-k075": 0.75, "escra-k100": 1, "escra": 1.5}
)

// FrontierPoint is one policy's place on a frontier.
type FrontierPoint struct {
	Policy        string
	K             float64
	ReservedCores float64
	// P999Us is the mean p99.9 over repetitions; Lo and Hi its 95 %
	// interval (Student t; equal to the mean with one repetition).
	P999Us, Lo, Hi float64
}

// Frontier is one cell's two curves, each sorted by reserved cores.
type Frontier struct {
	Cell
	Static, Escra []FrontierPoint
	// OracleShare is the cell's CellBudget.OracleShare (0: unknown).
	OracleShare float64
}

// OffsetCells are the cells the results mark as peaking apart.
func OffsetCells(r *Results) map[Cell]bool {
	out := map[Cell]bool{}
	for _, b := range r.Budgets {
		if b.Offset {
			out[Cell{b.Workload, b.Load}] = true
		}
	}
	return out
}

// Frontiers builds the frontier of every offset cell that ran static15
// (the point the budget ratio is read at) and at least two points of
// Escra's curve. The quick matrix runs only those (static15, escra-k100,
// escra); the full one every k of both curves.
func Frontiers(r *Results, aggs map[Key]*Agg) []Frontier {
	off := OffsetCells(r)
	oracle := map[Cell]float64{}
	for _, b := range r.Budgets {
		oracle[Cell{b.Workload, b.Load}] = b.OracleShare
	}
	var out []Frontier
	for _, c := range Cells(aggs) {
		if !off[c] {
			continue
		}
		f := Frontier{Cell: c, OracleShare: oracle[c]}
		for p, a := range aggs {
			if p.Cell != c || !a.HasClient {
				continue
			}
			pt := FrontierPoint{Policy: p.Policy, ReservedCores: a.ReservedCores.Mean,
				P999Us: a.P999Us.Mean, Lo: a.P999Us.Mean - a.P999Us.CI95, Hi: a.P999Us.Mean + a.P999Us.CI95}
			if k, ok := frontierStatic[p.Policy]; ok {
				pt.K = k
				f.Static = append(f.Static, pt)
			} else if k, ok := frontierEscra[p.Policy]; ok {
				pt.K = k
				f.Escra = append(f.Escra, pt)
			}
		}
		for _, pts := range [][]FrontierPoint{f.Static, f.Escra} {
			sort.Slice(pts, func(i, j int) bool { return pts[i].ReservedCores < pts[j].ReservedCores })
		}
		if f.static15() != nil && len(f.Escra) >= 2 {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Workload+"/"+out[i].Load < out[j].Workload+"/"+out[j].Load
	})
	return out
}

// BudgetRatioAtStatic15 is the share of static15's reserved cores at
// which Escra's p99.9 reaches static15's mean p99.9, read off Escra's
// curve through the upper ends of its intervals (the end worse for
// Escra), linearly between points. Where even Escra's smallest budget is
// as fast, that budget's ratio is returned (an upper bound); NaN where no
// budget of the curve reaches it, or static15 did not run.
func (f Frontier) BudgetRatioAtStatic15() float64 {
	st := f.static15()
	if st == nil || !(st.ReservedCores > 0) {
		return math.NaN()
	}
	return InterpolateReserved(f.Escra, st.P999Us) / st.ReservedCores
}

func (f Frontier) static15() *FrontierPoint {
	for i := range f.Static {
		if f.Static[i].Policy == "static15" {
			return &f.Static[i]
		}
	}
	return nil
}

// InterpolateReserved is the smallest reserved cores at which the curve
// through pts' upper interval ends (sorted by reserved cores) falls to
// target or below; NaN if it never does.
func InterpolateReserved(pts []FrontierPoint, target float64) float64 {
	for i, p := range pts {
		if p.Hi > target {
			continue
		}
		if i == 0 {
			return p.ReservedCores
		}
		q := pts[i-1] // above target: cross between q and p
		return q.ReservedCores + (q.Hi-target)/(q.Hi-p.Hi)*(p.ReservedCores-q.ReservedCores)
	}
	return math.NaN()
}

// frontierSummary adds the frontier and offset-cell keys to s.
func frontierSummary(s map[string]any, r *Results, aggs map[Key]*Agg, ds []Delta, putDelta func(string, Delta)) {
	fs := Frontiers(r, aggs)
	worst, unreached := math.Inf(-1), 0
	for _, f := range fs {
		v := f.BudgetRatioAtStatic15()
		if math.IsNaN(v) {
			unreached++
			continue
		}
		s[KeyName(f.Workload)+"_"+KeyName(f.Load)+"_escra_budget_ratio_at_static15_p999"] = v
		worst = max(worst, v)
	}
	s["offset_frontier_cells"] = len(fs)
	s["offset_frontier_cells_unreached"] = unreached
	// The worst offset cell, and only when every cell's curve reached it.
	if len(fs) > 0 && unreached == 0 {
		s["offset_escra_budget_ratio_at_static15_p999"] = worst
	}
	// Beside each ratio, the oracle's: no allocator that only moves budget
	// matches static15 period by period with less (bench/replay).
	worstOracle := 0.0
	for _, b := range r.Budgets {
		if b.Offset && b.OracleShare > 0 {
			s[KeyName(b.Workload)+"_"+KeyName(b.Load)+"_oracle_share_of_static15"] = b.OracleShare
			worstOracle = max(worstOracle, b.OracleShare)
		}
	}
	if worstOracle > 0 {
		s["offset_oracle_share_of_static15"] = worstOracle
	}
	off := OffsetCells(r)
	var offDs []Delta
	for _, d := range ds {
		if off[d.Cell] {
			offDs = append(offDs, d)
		}
	}
	for _, row := range TableI(offDs) {
		row.Avg.HasClient = row.ClientCells > 0
		p := "offset_" + KeyName(row.Escra) + "_vs_" + KeyName(row.Baseline) + "_"
		putDelta(p, row.Avg)
		s[p+"cells"] = row.Cells
	}
	// Colocation: batch CPU beside Escra over beside static15.
	if b := BatchCoresMean(aggs); b["static15+batch"] > 0 {
		if e, ok := b["escra+batch"]; ok {
			s["escra_batch_cores_ratio"] = e / b["static15+batch"]
		}
	}
}

// withoutOffset drops the offset cells' deltas: Table I's rows average
// the cells whose containers peak together, the offset cells apart.
func withoutOffset(r *Results, ds []Delta) []Delta {
	off := OffsetCells(r)
	if len(off) == 0 {
		return ds
	}
	var out []Delta
	for _, d := range ds {
		if !off[d.Cell] {
			out = append(out, d)
		}
	}
	return out
}
