package report

import (
	"math"
	"testing"

	"os"
	"path/filepath"
	"strings"

	"github.com/escra-dev/escra/internal/load"
)

func TestInterpolateReserved(t *testing.T) {
	pts := []FrontierPoint{{ReservedCores: 0.4, Hi: 50}, {ReservedCores: 0.6, Hi: 30}, {ReservedCores: 0.8, Hi: 10}}
	for target, want := range map[float64]float64{
		40: 0.5,  // halfway between the first two points
		20: 0.7,  // between the last two
		60: 0.4,  // the smallest budget is already as fast
		10: 0.8,  // exactly the last point
		5:  -1.0, // never reached
	} {
		got := InterpolateReserved(pts, target)
		if want < 0 {
			if !math.IsNaN(got) {
				t.Errorf("target %v: %v, want NaN", target, got)
			}
			continue
		}
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("target %v: %v, want %v", target, got, want)
		}
	}
}

// frontierResults: one offset cell, three repetitions per policy. Static
// at k reserves k × 0.4 cores with p99.9 ≈ 100 ms / k; Escra at the same
// totals ≈ 60 ms / k; each repetition is ±2 ms about the mean. Operators'
// static15mon reserves 0.3 core at ≈ 200 ms.
func frontierResults() *Results {
	r := &Results{Budgets: []CellBudget{{Workload: "offset-pair", Load: "burst", Static15LimitCores: 0.6, EscraBudgetCores: 0.6, Offset: true},
		{Workload: "demo-http", Load: "burst", Static15LimitCores: 0.6, EscraBudgetCores: 0.6}}}
	add := func(wl, pol string, reserved, p999Ms, batch float64) {
		for rep, d := range []float64{-2, 0, 2} {
			r.Runs = append(r.Runs, Run{Workload: wl, Load: "burst", Policy: pol, Rep: rep, ReservedCores: reserved, BatchCores: batch,
				Client: load.Result{Requests: 100, Successes: 100, P999Us: (p999Ms + d) * 1000, ThroughputRPS: 50}})
		}
	}
	for pol, k := range frontierStatic {
		add("offset-pair", pol, 0.4*k, 100/k, 0)
	}
	for pol, k := range frontierEscra {
		add("offset-pair", pol, 0.4*k, 60/k, 0)
	}
	add("offset-pair", "static15mon", 0.3, 200, 0)
	add("offset-pair", "static15+batch", 0.6, 70, 0.2)
	add("offset-pair", "escra+batch", 0.6, 45, 0.5)
	// A cell that peaks together: no frontier, and not in the offset keys.
	add("demo-http", "static15", 0.6, 10, 0)
	add("demo-http", "escra", 0.6, 40, 0)
	return r
}

// The budget ratio read off Escra's curve through its intervals' upper
// ends: static15's p99.9 is 66.7 ms; Escra's upper ends are 122.5 ms at
// 0.2 core, 82.5 at 0.3, 62.5 at 0.4, so it is crossed at 0.3 + 0.1 ×
// (82.5 − 66.7)/(82.5 − 62.5) cores, a ratio of that over 0.6.
func TestFrontierKeys(t *testing.T) {
	r := frontierResults()
	s := Summary(r)
	hw := 2 * tCrit95(3) / math.Sqrt(3) // the interval's half-width, ms
	crossHi := 60/1.0 + hw              // Escra k=1 upper end
	prevHi := 60/0.75 + hw              // Escra k=0.75 upper end
	target := 100 / 1.5
	want := (0.3 + 0.1*(prevHi-target)/(prevHi-crossHi)) / 0.6
	got, ok := s["offset_escra_budget_ratio_at_static15_p999"].(float64)
	if !ok || math.Abs(got-want) > 1e-9 {
		t.Fatalf("offset_escra_budget_ratio_at_static15_p999 = %v, want %v", s["offset_escra_budget_ratio_at_static15_p999"], want)
	}
	if v := s["offset_pair_burst_escra_budget_ratio_at_static15_p999"]; v != got {
		t.Errorf("the cell's key %v differs from the offset key %v", v, got)
	}
	if n := s["offset_frontier_cells"]; n != 1 {
		t.Errorf("offset_frontier_cells = %v, want 1 (demo-http peaks together)", n)
	}
	// Against static15mon: (200 − 60/1.5)/200 = 80 % lower p99.9, its
	// interval above 0; the demo-http cell (Escra 4× slower) is not in it.
	lo, ok := s["offset_escra_vs_static15mon_p999_latency_delta_pct_ci95_lo"].(float64)
	if !ok || !(lo > 70 && lo < 80) {
		t.Errorf("offset_escra_vs_static15mon_p999_latency_delta_pct_ci95_lo = %v, want in (70, 80)", s["offset_escra_vs_static15mon_p999_latency_delta_pct_ci95_lo"])
	}
	if d := s["offset_escra_vs_static15_p999_latency_delta_pct"].(float64); math.Abs(d-40) > 1e-9 {
		t.Errorf("offset escra vs static15 p99.9 delta %v, want 40 (the demo-http cell left out)", d)
	}
	if d := s["escra_vs_static15_p999_latency_delta_pct"].(float64); math.Abs(d+300) > 1e-9 {
		t.Errorf("escra vs static15 p99.9 delta %v over the cells that peak together, want −300 (demo-http only)", d)
	}
	if v := s["escra_batch_cores_ratio"]; math.Abs(v.(float64)-2.5) > 1e-9 {
		t.Errorf("escra_batch_cores_ratio = %v, want 0.5/0.2", v)
	}
	// The oracle share: per offset cell, and the worst; none without it.
	if s["offset_oracle_share_of_static15"] != nil {
		t.Errorf("oracle share %v without a profile's figure", s["offset_oracle_share_of_static15"])
	}
	r.Budgets[0].OracleShare = 0.6
	r.Budgets = append(r.Budgets, CellBudget{Workload: "fanout", Load: "shift", Static15LimitCores: 0.8, EscraBudgetCores: 0.8, Offset: true, OracleShare: 0.7})
	s = Summary(r)
	if s["offset_pair_burst_oracle_share_of_static15"] != 0.6 || s["fanout_shift_oracle_share_of_static15"] != 0.7 || s["offset_oracle_share_of_static15"] != 0.7 {
		t.Errorf("oracle shares %v, %v, worst %v: want 0.6, 0.7 and 0.7", s["offset_pair_burst_oracle_share_of_static15"],
			s["fanout_shift_oracle_share_of_static15"], s["offset_oracle_share_of_static15"])
	}
	r.Budgets = r.Budgets[:2]
	// A curve that never reaches static15's p99.9 leaves the key out.
	for i := range r.Runs {
		if _, ok := frontierEscra[r.Runs[i].Policy]; ok && r.Runs[i].Workload == "offset-pair" {
			r.Runs[i].Client.P999Us *= 3
		}
	}
	if s = Summary(r); s["offset_escra_budget_ratio_at_static15_p999"] != nil || s["offset_frontier_cells_unreached"] != 1 {
		t.Errorf("unreached frontier: ratio %v, unreached %v", s["offset_escra_budget_ratio_at_static15_p999"], s["offset_frontier_cells_unreached"])
	}
}

// The report draws the frontier as SVG and tabulates it.
func TestFrontierReport(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(frontierResults(), dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "plots", "frontier_offset_pair_burst.svg"))
	if err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("no SVG frontier plot: %v", err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## The latency–reservation frontier", "| 0.75 | 0.300 | 133.3", "Escra reaches static15's p99.9 with **0.6"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(string(md), "frontier_demo_http") {
		t.Error("a cell that peaks together got a frontier")
	}
}

// The quick matrix's frontier: static15 alone on static's curve and
// Escra at k = 1 and 1.5 still give the budget ratio and the plot.
func TestFrontierOfTheQuickPoints(t *testing.T) {
	r := frontierResults()
	var kept []Run
	for _, run := range r.Runs {
		if p := run.Policy; run.Workload != "offset-pair" || p == "static15" || p == "escra-k100" || p == "escra" || p == "static15mon" {
			kept = append(kept, run)
		}
	}
	r.Runs = kept
	// Escra's upper ends: 62.5 ms at 0.4 core, already below static15's
	// 66.7 ms: the ratio is that of its smallest budget, 0.4/0.6.
	s := Summary(r)
	if got, ok := s["offset_escra_budget_ratio_at_static15_p999"].(float64); !ok || math.Abs(got-0.4/0.6) > 1e-9 {
		t.Fatalf("offset_escra_budget_ratio_at_static15_p999 = %v, want %v", s["offset_escra_budget_ratio_at_static15_p999"], 0.4/0.6)
	}
	dir := t.TempDir()
	if err := Generate(r, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "plots", "frontier_offset_pair_burst.svg")); err != nil {
		t.Errorf("no frontier plot with one static point: %v", err)
	}
}
