package report

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/internal/load"
)

// synthetic builds runs with known figures: Escra halves p99.9 latency
// against static15 (10 vs 20 ms), gets 10 % more throughput, and has a
// tenth of its CPU slack and a quarter of its memory slack.
func synthetic() *Results {
	r := &Results{Machine: Machine{Hostname: "h", CPUs: 2, MemBytes: 24 << 30, Kernel: "6.1.0-test"},
		Commit: "abc1234", Date: "2026-11-23T05:00:00Z", Mode: "quick",
		Overheads: map[string]float64{"apply_latency_direct_us": 35, "apply_latency_docker_update_us": 21000},
		Pinning:   Pinning{ClientCPUs: "0", AppCPUs: "1", EscraCPUs: "0"},
		// burst is deliberately unfair: Escra got 0.1 core more.
		Budgets: []CellBudget{{Workload: "demo-http", Load: "fixed", Static15LimitCores: 1.5, EscraBudgetCores: 1.5}, {Workload: "demo-http", Load: "burst", Static15LimitCores: 1.5, EscraBudgetCores: 1.6}}}
	batch := map[string]float64{"escra": 0.6, "static15": 0.2, "autopilot": 0.4}
	type pol struct {
		name           string
		p999, tput     [2]float64
		cpuSlack, mem  float64
		oom, changes   int
		cpuLimitFactor float64
	}
	pols := []pol{
		{"escra", [2]float64{10e3, 12e3}, [2]float64{110, 110}, 0.1, 25, 0, 40, 1.1},
		{"static15", [2]float64{20e3, 20e3}, [2]float64{100, 100}, 1.0, 100, 0, 0, 1.5},
		{"autopilot", [2]float64{40e3, 40e3}, [2]float64{55, 55}, 0.5, 50, 3, 10, 1.2},
	}
	for _, ld := range []string{"fixed", "burst"} {
		for _, p := range pols {
			for rep := 0; rep < 2; rep++ {
				run := Run{Workload: "demo-http", Load: ld, Policy: p.name, Rep: rep, DurationS: 10,
					Client:           load.Result{Tool: "vegeta", Shape: ld, Requests: 1000, Successes: 990, P50Us: 1000, P99Us: p.p999[rep] / 2, P999Us: p.p999[rep], ThroughputRPS: p.tput[rep]},
					ThrottledPeriods: 5, Periods: 100, OOMKills: p.oom, LimitChanges: p.changes,
					ControllerCPUSeconds: 0.2, DaemonCPUSeconds: 0.1, SeriesContainer: "demo-http-0",
					ReservedCores: 1.5, BatchCores: batch[p.name] + 0.1*float64(rep), ClientCPUCores: 0.3, ClientSelfCores: 0.25}
				for i := 0; i < 100; i++ {
					// Slack varies ±20 % around its level so CDFs have a shape.
					f := 0.8 + 0.4*float64(i)/99
					run.Slack = append(run.Slack, SlackSample{TMs: int64(i * 100), CPUCores: p.cpuSlack * f, MemMiB: p.mem * f})
					use := 0.5 + 0.3*math.Sin(float64(i)/10)
					run.Series = append(run.Series, SeriesPoint{TMs: int64(i * 100), CPUUsage: use, CPULimit: use * p.cpuLimitFactor,
						MemUsageMiB: 100 + 50*math.Sin(float64(i)/15), MemLimitMiB: 150 + p.mem})
				}
				r.Runs = append(r.Runs, run)
			}
		}
	}
	// A workload without a client: slack counts, latency does not.
	for _, p := range pols[:2] {
		run := Run{Workload: "memwave", Load: "wave", Policy: p.name, DurationS: 10, Client: load.Result{Tool: "none"}, BatchCores: 2 * batch[p.name]}
		for i := 0; i < 50; i++ {
			run.Slack = append(run.Slack, SlackSample{TMs: int64(i * 100), CPUCores: p.cpuSlack, MemMiB: p.mem})
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

func TestAggregateAndDeltas(t *testing.T) {
	aggs := Aggregate(synthetic())
	e := aggs[Key{Cell{"demo-http", "fixed"}, "escra"}]
	// p99.9 of 10 and 12 ms: mean 11 ms, sd √2 ms, CI = t(1 df)·sd/√2 = 12.706 ms.
	if e.P999Us.N != 2 || math.Abs(e.P999Us.Mean-11e3) > 1e-9 || math.Abs(e.P999Us.CI95-12.706e3) > 1e-6 {
		t.Errorf("escra p99.9 stat %+v", e.P999Us)
	}
	// Slack samples 0.08..0.12 evenly: nearest-rank p50 is sample 50 of 100.
	if want := 0.1 * (0.8 + 0.4*49/99); math.Abs(e.CPUSlackP50.Mean-want) > 1e-12 {
		t.Errorf("cpu slack p50 %v, want %v", e.CPUSlackP50.Mean, want)
	}
	if e.LimitChangesPerS.Mean != 4 || e.ControllerCPUPct.Mean != 2 || e.ThrottledFrac.Mean != 0.05 {
		t.Errorf("rates %+v %+v %+v", e.LimitChangesPerS, e.ControllerCPUPct, e.ThrottledFrac)
	}
	ds := Deltas(aggs)
	if len(ds) != 5 { // 2 cells × 2 baselines + memwave vs static15
		t.Fatalf("%d deltas", len(ds))
	}
	var vsStatic Delta
	for _, d := range ds {
		if d.Baseline == "static15" && d.Load == "fixed" {
			vsStatic = d
		}
	}
	for name, got := range map[string][2]float64{
		"p99.9 latency (20 → 11 ms)": {vsStatic.P999Latency, 45},
		"throughput (100 → 110)":     {vsStatic.Throughput, 10},
		"cpu slack p50 (÷10)":        {vsStatic.CPUSlackP50, 90},
		"mem slack p99 (÷4)":         {vsStatic.MemSlackP99, 75},
	} {
		if math.Abs(got[0]-got[1]) > 1e-9 {
			t.Errorf("%s: %v %%, want %v %%", name, got[0], got[1])
		}
	}
	rows := TableI(ds)
	if len(rows) != 2 || rows[0].Baseline != "static15" || rows[0].Cells != 3 || rows[0].ClientCells != 2 ||
		math.Abs(rows[0].Avg.P999Latency-45) > 1e-9 || math.Abs(rows[0].Avg.CPUSlackP50-90) > 1e-9 || math.Abs(rows[1].Avg.Throughput-100) > 1e-9 {
		t.Errorf("table rows %+v", rows)
	}
	// Escra's p99.9 resamples to 10, 11 or 12 ms per cell: 50, 45 or 40 %,
	// so the Table I interval holds 45 and stays within [40, 50].
	if a := rows[0].Avg; !(40 <= a.Lo[0] && a.Lo[0] < 45 && 45 < a.Hi[0] && a.Hi[0] <= 50) {
		t.Errorf("Table I p99.9 CI [%v, %v]", a.Lo[0], a.Hi[0])
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	r := synthetic()
	in := filepath.Join(dir, "results.json")
	if err := r.Save(in); err != nil {
		t.Fatal(err)
	}
	r2, err := Load(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := Generate(r2, dir); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		"escra_vs_static15_p999_latency_delta_pct":                 45,
		"escra_vs_static15_throughput_delta_pct":                   10,
		"escra_vs_autopilot_cpu_slack_p50_delta_pct":               80,
		"demo_http_fixed_escra_vs_static15_p999_latency_delta_pct": 45,
		"demo_http_burst_static15_p999_latency_us":                 20e3,
		"autopilot_oom_kills_total":                                12, // 3 per run × 2 reps × 2 loads
		"escra_oom_kills_total":                                    0,
		"overhead_apply_latency_direct_us":                         35,
		"reps":                                                     1, // memwave ran once
		"demo_http_burst_escra_reps":                               2,
		"demo_http_fixed_escra_budget_cores":                       1.5,
		"demo_http_burst_escra_budget_cores":                       1.6,
		"demo_http_burst_static15_limit_cores":                     1.5,
		"demo_http_fixed_escra_batch_cores":                        0.65, // 0.6 and 0.7
		"demo_http_fixed_escra_reserved_cores":                     1.5,
		"demo_http_fixed_escra_client_cpu_cores":                   0.3,
		"demo_http_fixed_escra_client_self_cores":                  0.25,
		"escra_batch_cores_mean":                                   (0.65 + 0.65 + 1.2) / 3,
		"static15_batch_cores_mean":                                (0.25 + 0.25 + 0.4) / 3, // 0.2 and 0.3 per demo-http cell
	} {
		got, ok := sum[k].(float64)
		if !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("summary %s = %v, want %v", k, sum[k], want)
		}
	}
	if sum["pinning_client_cpus"] != "0" || sum["pinning_app_cpus"] != "1" || sum["pinning_escra_cpus"] != "0" {
		t.Errorf("pinning: %v %v %v", sum["pinning_client_cpus"], sum["pinning_app_cpus"], sum["pinning_escra_cpus"])
	}
	if _, ok := sum["memwave_wave_escra_budget_cores"]; ok {
		t.Errorf("budget key for a cell without a budget")
	}
	if sum["commit"] != "abc1234" || sum["kernel"] != "6.1.0-test" {
		t.Errorf("metadata: commit %v kernel %v", sum["commit"], sum["kernel"])
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Table I analogue", "| static15 | 3 (2) | 45.0 % [40.0, 50.0] |", "| static15 | 0.550 (0) |",
		"UNFAIR: demo-http/burst: Escra's budget 1.600 cores ≠ Σ static15 limits 1.500 cores (+0.100).",
		"No budget recorded for: memwave/wave.", `client (bench-run and the load tools) on CPUs "0"`,
		"| escra | 3 | 1.000 | 0.833 |", "| 1.50 ± 0.00 | 0.65 ± 0.64 | 0.30 / 0.25 |",
		"| static15 | 45.0 % [40.0, 50.0]; -9.00 ms |", "- escra vs static15: worse in no cell.",
		"random order", "percentile bootstrap", "No cell is dropped", "for the geometric mean only", "one 2-CPU machine", "plots/fig4_vs_static15.png",
		"plots/fig5_cpu_slack_cdf_demo_http_burst.png", "plots/fig2_series_demo_http_fixed_autopilot.png", "apply_latency_docker_update_us"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(string(md), "could not be drawn") {
		t.Errorf("plots failed:\n%s", md)
	}
	// Every plot is a real PNG of sensible size with more than one colour.
	pngs, _ := filepath.Glob(filepath.Join(dir, "plots", "*.png"))
	if len(pngs) != 2+2*3+6 { // fig4 × 2 baselines, fig5/6 × 3 cells, fig2 × 6 runs with series
		t.Errorf("%d plots: %v", len(pngs), pngs)
	}
	for _, p := range pngs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		bd := img.Bounds()
		if bd.Dx() < 300 || bd.Dy() < 200 {
			t.Errorf("%s is %v", p, bd)
		}
		colours := map[[4]uint32]bool{}
		for y := bd.Min.Y; y < bd.Max.Y; y += 7 {
			for x := bd.Min.X; x < bd.Max.X; x += 7 {
				r, g, b, a := img.At(x, y).RGBA()
				colours[[4]uint32{r, g, b, a}] = true
			}
		}
		if len(colours) < 4 {
			t.Errorf("%s has %d colours: blank plot?", p, len(colours))
		}
	}
	if os.Getenv("ESCRA_KEEP_REPORT") != "" {
		t.Logf("report kept in %s", dir)
		os.CopyFS(os.Getenv("ESCRA_KEEP_REPORT"), os.DirFS(dir))
	}
}

func TestLoadRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty":   `{"runs": []}`,
		"unnamed": `{"runs": [{"workload": "x", "load": ""}]}`,
		"garbage": `{`,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestKeyName(t *testing.T) {
	if got := KeyName("Demo-HTTP/x.1"); got != "demo_http_x_1" {
		t.Errorf("KeyName = %q", got)
	}
}

// cellRuns adds one run per value of p999 (µs) for (w, l, policy), with a
// constant CPU slack and memory slack so their percentiles are exact.
func cellRuns(r *Results, w, l, policy string, p999 []float64, cpuSlack, memSlack float64) {
	for rep, v := range p999 {
		run := Run{Workload: w, Load: l, Policy: policy, Rep: rep, DurationS: 10,
			Client: load.Result{Requests: 100, Successes: 100, P50Us: v / 4, P99Us: v / 2, P999Us: v, ThroughputRPS: 100}}
		for i := 0; i < 10; i++ {
			run.Slack = append(run.Slack, SlackSample{TMs: int64(i * 100), CPUCores: cpuSlack, MemMiB: memSlack})
		}
		r.Runs = append(r.Runs, run)
	}
}

// A tiny baseline slack no longer drops the cell: its percentage is huge
// but counts in the Table I mean, and the absolute difference is reported.
// A zero baseline has no percentage, only the difference, and is tallied.
func TestNoCellDroppedForSmallBaseline(t *testing.T) {
	r := &Results{}
	cellRuns(r, "a", "x", "escra", []float64{10, 10, 10}, 0.1, 5)
	cellRuns(r, "a", "x", "static15", []float64{20, 20, 20}, 0.2, 10)
	cellRuns(r, "b", "y", "escra", []float64{10, 10, 10}, 0.2, 3)
	cellRuns(r, "b", "y", "static15", []float64{20, 20, 20}, 0.002, 0)
	ds := Deltas(Aggregate(r))
	if len(ds) != 2 {
		t.Fatalf("%d deltas", len(ds))
	}
	// (0.002 − 0.2)/0.002 = −9900 %; the old floor (0.01 cores) dropped it.
	if math.Abs(ds[1].CPUSlackP50+9900) > 1e-6 || math.Abs(ds[1].Diff[3]-0.198) > 1e-12 {
		t.Errorf("small baseline: %v %%, diff %v cores", ds[1].CPUSlackP50, ds[1].Diff[3])
	}
	if !math.IsNaN(ds[1].MemSlackP50) || ds[1].Diff[5] != 3 {
		t.Errorf("zero baseline: %v %%, diff %v MiB", ds[1].MemSlackP50, ds[1].Diff[5])
	}
	row := TableI(ds)[0]
	if row.N[3] != 2 || math.Abs(row.Avg.CPUSlackP50-(50-9900)/2.0) > 1e-6 {
		t.Errorf("cpu slack mean %v over %d cells", row.Avg.CPUSlackP50, row.N[3])
	}
	if row.N[5] != 1 || row.Undefined[5] != 1 || row.Avg.MemSlackP50 != 50 || row.Avg.Diff[5] != (-5+3)/2.0 {
		t.Errorf("mem slack mean %v over %d cells, %d undefined, diff %v", row.Avg.MemSlackP50, row.N[5], row.Undefined[5], row.Avg.Diff[5])
	}
	// Identical repetitions: every interval collapses to its point.
	if row.Avg.Lo[3] != row.Avg.CPUSlackP50 || row.Avg.Hi[3] != row.Avg.CPUSlackP50 || ds[0].Lo[0] != 50 || ds[0].Hi[0] != 50 {
		t.Errorf("collapsed CIs: table [%v, %v], cell [%v, %v]", row.Avg.Lo[3], row.Avg.Hi[3], ds[0].Lo[0], ds[0].Hi[0])
	}
	s := Summary(r)
	for k, want := range map[string]float64{
		"b_y_escra_vs_static15_cpu_slack_p50_delta_pct":  -9900,
		"b_y_escra_vs_static15_cpu_slack_p50_diff_cores": 0.198,
		"b_y_escra_vs_static15_mem_slack_p50_diff_mib":   3,
		"b_y_escra_vs_static15_p999_latency_diff_us":     -10,
		"b_y_escra_vs_static15_throughput_diff_rps":      0,
		"escra_vs_static15_cpu_slack_p50_delta_pct":      -4925,
		"escra_vs_static15_mem_slack_p50_delta_pct":      50,
		"escra_vs_static15_mem_slack_p50_diff_mib":       -1,
	} {
		if got, ok := s[k].(float64); !ok || math.Abs(got-want) > 1e-6 {
			t.Errorf("summary %s = %v, want %v", k, s[k], want)
		}
	}
	if _, ok := s["b_y_escra_vs_static15_mem_slack_p50_delta_pct"]; ok {
		t.Errorf("undefined percentage written")
	}
	if s["reps"] != 3 {
		t.Errorf("reps %v, want 3", s["reps"])
	}
	if s["escra_vs_static15_mem_slack_p50_delta_pct_undefined"] != 1 || s["escra_vs_static15_mem_slack_p50_geomean_excluded"] != 1 {
		t.Errorf("tallies: undefined %v, geomean excluded %v", s["escra_vs_static15_mem_slack_p50_delta_pct_undefined"], s["escra_vs_static15_mem_slack_p50_geomean_excluded"])
	}
}

func TestBootstrapCell(t *testing.T) {
	lat := Metrics[0]
	e, b := []float64{10, 12, 11, 13, 9}, []float64{20, 22, 19, 21, 18}
	point := lat.pct(mean(b), mean(e))
	lo, hi := bootstrapCell(lat, e, b, 42)
	if !(lo < point && point < hi) {
		t.Errorf("CI [%v, %v] misses point %v", lo, hi, point)
	}
	// Resampled means stay within the data's range: 9..13 vs 18..22.
	if lo < (18-13)/18.0*100 || hi > (22-9)/22.0*100 {
		t.Errorf("CI [%v, %v] beyond what any resample can give", lo, hi)
	}
	if lo2, hi2 := bootstrapCell(lat, e, b, 42); lo2 != lo || hi2 != hi {
		t.Errorf("same seed, different CI: [%v, %v] vs [%v, %v]", lo, hi, lo2, hi2)
	}
	if lo3, hi3 := bootstrapCell(lat, e, b, 43); lo3 == lo && hi3 == hi {
		t.Errorf("seed ignored: [%v, %v]", lo3, hi3)
	}
	if lo, hi := bootstrapCell(lat, []float64{7, 7, 7}, []float64{10, 10, 10}, 1); lo != 30 || hi != 30 {
		t.Errorf("identical reps: CI [%v, %v], want [30, 30]", lo, hi)
	}
	if lo, _ := bootstrapCell(lat, []float64{7}, b, 1); !math.IsNaN(lo) {
		t.Errorf("one repetition has a CI: %v", lo)
	}
	// The whole report is reproducible: two runs, identical summaries.
	s1, _ := json.Marshal(Summary(synthetic()))
	s2, _ := json.Marshal(Summary(synthetic()))
	if string(s1) != string(s2) {
		t.Errorf("summary differs between runs")
	}
}

// Ratios 0.25 and 1 give a geometric mean of 0.5; a cell with zero Escra
// slack has no positive ratio and is left out of the geometric mean only.
func TestGeoMean(t *testing.T) {
	r := &Results{}
	cellRuns(r, "a", "x", "escra", []float64{10, 10}, 0.25, 1)
	cellRuns(r, "a", "x", "static15", []float64{40, 40}, 1, 1)
	cellRuns(r, "b", "x", "escra", []float64{10, 10}, 0.5, 1)
	cellRuns(r, "b", "x", "static15", []float64{10, 10}, 0.5, 1)
	cellRuns(r, "c", "x", "escra", []float64{10, 10}, 0, 1)
	cellRuns(r, "c", "x", "static15", []float64{10, 10}, 0.5, 1)
	row := TableI(Deltas(Aggregate(r)))[0]
	if math.Abs(row.GeoMean[3]-0.5) > 1e-12 || row.GeoExcluded[3] != 1 {
		t.Errorf("cpu slack geomean %v, %d excluded", row.GeoMean[3], row.GeoExcluded[3])
	}
	// Arithmetic mean of 75, 0 and 100 %: every cell.
	if math.Abs(row.Avg.CPUSlackP50-175/3.0) > 1e-9 || row.N[3] != 3 {
		t.Errorf("cpu slack mean %v over %d cells", row.Avg.CPUSlackP50, row.N[3])
	}
	// p99.9 ratios 0.25, 1, 1: (0.25)^(1/3).
	if math.Abs(row.GeoMean[0]-math.Cbrt(0.25)) > 1e-12 || row.GeoExcluded[0] != 0 {
		t.Errorf("latency geomean %v, %d excluded", row.GeoMean[0], row.GeoExcluded[0])
	}
}

// The report names every cell where an Escra policy's p99.9 latency is
// worse than static15's, with the numbers, and tallies undefined ones.
func TestMarkdownNamesLosses(t *testing.T) {
	r := &Results{}
	cellRuns(r, "a", "x", "escra", []float64{10e3, 10e3, 10e3}, 0.1, 1)
	cellRuns(r, "a", "x", "escra-paper", []float64{10e3, 10e3, 10e3}, 0.1, 1)
	cellRuns(r, "a", "x", "static15", []float64{20e3, 20e3, 20e3}, 0.2, 1)
	cellRuns(r, "b", "y", "escra", []float64{30e3, 30e3, 30e3}, 0.1, 1)
	cellRuns(r, "b", "y", "escra-paper", []float64{15e3, 15e3, 15e3}, 0.1, 1)
	cellRuns(r, "b", "y", "static15", []float64{20e3, 20e3, 20e3}, 0.2, 0)
	aggs := Aggregate(r)
	md := Markdown(r, aggs, Deltas(aggs), plotFiles{})
	for _, s := range []string{
		"- escra vs static15, b/y: 30.00 ms against 20.00 ms, -50.0 % [-50.0, -50.0] (+10.00 ms).",
		"- escra-paper vs static15: worse in no cell.",
		"escra vs static15, p50 mem slack: 1 (mean difference over all cells +0.5 MiB)",
		"| static15 (escra-paper) |", "Pinning: not recorded.",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(md, "escra vs static15, a/x") {
		t.Errorf("a win listed as a loss")
	}
	if t.Failed() {
		t.Log(md)
	}
}
