package mu

import (
	"math"
	"strings"
	"testing"
)

const excerpt = "testdata/azure_inv_excerpt.csv"

func TestReadAzureTraceExcerpt(t *testing.T) {
	tr, err := ReadAzureTrace(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Fns) != 4 || len(tr.Fns[0].Counts) != 1440 {
		t.Fatalf("%d rows, %d minutes; want 4 rows of 1440", len(tr.Fns), len(tr.Fns[0].Counts))
	}
	// Totals as the trace's README lists them for rows 142, 400, 453, 495.
	for i, want := range []float64{279482, 150876, 442253, 1208787} {
		if got := tr.Fns[i].Total(); got != want {
			t.Errorf("row %d: %.0f invocations, want %.0f", i+1, got, want)
		}
	}
	if f, note, err := tr.Pick("3"); err != nil || f.Peak() != 2241 || note != "row 3" {
		t.Fatalf("row 3: peak %.0f, %q, %v", f.Peak(), note, err)
	}
	if f, note, err := tr.Pick("af9ae6f6"); err != nil || f.Row != 3 || !strings.Contains(note, "row 3") {
		t.Fatalf("by hash: row %d, %q, %v", f.Row, note, err)
	}
	if _, _, err := tr.Pick("9"); err == nil || !strings.Contains(err.Error(), "rows 1..4") {
		t.Fatalf("row 9 of 4: %v", err)
	}
}

// A repeated hash picks the first row and says which rows carry it.
func TestPickRepeatedHash(t *testing.T) {
	h := "HashFunction,HashApp,HashOwner,minute_1,minute_2\n"
	tr, err := parseAzureTrace("x.csv", strings.NewReader(h+"aaaaaaaa,a,a,1,2\nbbbbbbbb,b,b,0,1\naaaaaaaa,a,a,5,5\n"))
	if err != nil {
		t.Fatal(err)
	}
	f, note, err := tr.Pick("aaaaaaaa")
	if err != nil || f.Row != 1 || !strings.Contains(note, "2 rows ([1 3])") {
		t.Fatalf("row %d, %q, %v", f.Row, note, err)
	}
}

// Bad input is one error naming the file and the line; the upstream
// header (numbered minute columns after a Trigger column) reads too.
func TestReadAzureTraceErrors(t *testing.T) {
	up := "HashOwner,HashApp,HashFunction,Trigger,1,2,3\no,a,f1,http,1,0,4\n"
	tr, err := parseAzureTrace("up.csv", strings.NewReader(up))
	if err != nil || tr.Fns[0].Hash != "f1" || tr.Fns[0].Total() != 5 {
		t.Fatalf("upstream format: %+v, %v", tr, err)
	}
	for _, c := range []struct{ in, want string }{
		{"", "bad.csv: empty file"},
		{"a,b,c\n", "bad.csv:1: header has no HashFunction"},
		{"HashFunction,minute_1,minute_2\nf,1\n", "bad.csv:2: 2 columns, the header has 3"},
		{"HashFunction,minute_1,minute_2\nf,1,2\ng,1,-3\n", `bad.csv:3: column minute_2: "-3" is not a non-negative count`},
		{"HashFunction,minute_1\nf,x\n", `bad.csv:2: column minute_1: "x"`},
		{"HashFunction,minute_1\n", "bad.csv: no function rows"},
	} {
		_, err := parseAzureTrace("bad.csv", strings.NewReader(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line starting %q", c.in, err, c.want)
		}
	}
}

// The most varied window, minutes as seconds, scaled to fit a peak; or a
// given scale and start.
func TestSegmentOf(t *testing.T) {
	f := AzureFunction{Row: 7, Hash: "h", Counts: []float64{0, 0, 10, 30, 20, 0, 5, 0}}
	s, err := SegmentOf(f, 3, 1, -1, 0, 60)
	if err != nil {
		t.Fatal(err)
	}
	// [0 10 30] and [30 20 0] vary alike (sd 12.5); the second has
	// more invocations.
	if s.Start != 3 || !s.ByRule || s.RawPeak != 30 || s.Scale != 2 || !s.ScaleFit || len(s.Rates) != 3 || s.Rates[0] != 60 || math.Abs(s.WindowSD-12.47) > 0.01 {
		t.Fatalf("%+v", s)
	}
	// Each minute as 2 s: a count of 30 at scale 1 is 15 req/s for 2 s.
	s, err = SegmentOf(f, 4, 2, 3, 1, 0)
	if err != nil || s.Start != 3 || len(s.Rates) != 4 || s.Rates[0] != 15 || s.Rates[1] != 15 || s.Rates[2] != 10 || s.ScaleFit {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := SegmentOf(f, 4, 1, 6, 1, 0); err == nil {
		t.Fatal("a window past the end was accepted")
	}
	if _, err := SegmentOf(AzureFunction{Row: 1, Counts: []float64{0, 0}}, 2, 1, -1, 0, 10); err == nil {
		t.Fatal("an idle window was accepted")
	}
}

// Fig. 2 on the excerpt: Mu's predictor cuts the error of the two
// variable functions by more than half and of row 400's noisy level by a
// sixth, and stays near the naive predictor on row 495's nearly constant
// series (an unstable model once made it 10× worse there).
func TestPredictorAccuracyExcerpt(t *testing.T) {
	tr, err := ReadAzureTrace(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	accs := PredictorAccuracies(tr, PaperMinInvocations)
	if len(accs) != 4 {
		t.Fatalf("%d functions above %d invocations, want 4", len(accs), PaperMinInvocations)
	}
	got := map[string]float64{}
	for _, a := range accs {
		got[a.Hash[:8]] = a.ReductionPct
		if a.MAEMu > 1.05*a.MAENaive {
			t.Errorf("row %d: predictor MAE %.2f vs naive %.2f", a.Row, a.MAEMu, a.MAENaive)
		}
	}
	for h, lo := range map[string]float64{"ff5ae4f6": 60, "af9ae6f6": 50, "c06a3e95": 10} {
		if got[h] < lo {
			t.Errorf("%s: reduction %.1f%%, want ≥ %.0f%%", h, got[h], lo)
		}
	}
	sum := map[string]float64{}
	PutPredictor(sum, accs, PaperMinInvocations)
	med, _ := MedianFunction(accs)
	// Sorted: 495, 400, 453, 142; the lower middle one is row 2 (400).
	if med.Row != 2 || sum["predictor_mae_reduction_median_pct"] != med.ReductionPct || sum["predictor_functions"] != 4 ||
		med.ReductionPct < 10 || sum["predictor_functions_better"] != 3 {
		t.Fatalf("summary %v, median %+v", sum, med)
	}
}

// Tables 3 and 5 on the excerpt: Table 3 replays Fig. 2's median function
// fitted to the machine, Table 5 the two most variable of the top by
// peak on one clock, each step in the summary.
func TestPickTracesExcerpt(t *testing.T) {
	tr, err := ReadAzureTrace(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	med, _ := MedianFunction(PredictorAccuracies(tr, PaperMinInvocations))
	cfg := Config{T3Seconds: 60, T5Seconds: 30, Parts: []string{"t3", "t5"}, Trace: TraceConfig{File: excerpt, MinuteAs: 1, Start: -1}}
	sum := map[string]float64{}
	var log []string
	tt, err := pickTraces(cfg, tr, &med, sum, func(s string) { log = append(log, s) })
	if err != nil {
		t.Fatal(err)
	}
	if sum["t3_trace_row"] != float64(med.Row) || len(tt.t3) != 60 || math.Abs(sum["t3_trace_peak_rps"]-t3FitPeak) > 1e-9 || sum["t3_trace_scale_fitted"] != 1 {
		t.Fatalf("Table 3: %v", sum)
	}
	// Rows 3 (CV 1.5) and 1 (CV 0.55) are the excerpt's most variable.
	if sum["t5_w1_trace_row"] != 3 || sum["t5_w2_trace_row"] != 1 || len(tt.w1) != 30 || len(tt.w2) != 30 {
		t.Fatalf("Table 5: %v", sum)
	}
	// Both peaks fit the budget at the paper's ÷ 100.
	_, _, p1 := Stats(tt.w1)
	_, _, p2 := Stats(tt.w2)
	if p1 > t5FitPeak || p2 > t5FitPeak || sum["t5_w1_trace_scale"] != t5PaperScale || len(log) != 4 ||
		sum["t5_w1_trace_start_minute"] != sum["t5_w2_trace_start_minute"] || sum["t5_w1_trace_window_by_rule"] != 1 {
		t.Fatalf("peaks %.1f, %.1f (budget %.0f), scale %v, log %q", p1, p2, t5FitPeak, sum["t5_w1_trace_scale"], log)
	}
	cfg.Trace.Function = "af9ae6f6"
	if _, err := pickTraces(cfg, tr, &med, sum, func(string) {}); err != nil || sum["t3_trace_row"] != 3 {
		t.Fatalf("-function by hash: row %.0f, %v", sum["t3_trace_row"], err)
	}
}

// Table 5 passes over a function silent most of the day, however high its
// CV, for the variable ones that run.
func TestTable5PairSkipsSilentFunctions(t *testing.T) {
	mk := func(row int, f func(i int) float64) AzureFunction {
		c := make([]float64, 100)
		for i := range c {
			c[i] = f(i)
		}
		return AzureFunction{Row: row, Hash: "h", Counts: c}
	}
	tr := &AzureTrace{File: "x", Fns: []AzureFunction{
		mk(1, func(i int) float64 { return float64(1000 * (i / 99)) }),  // one spike: CV 9.9, active 1 %
		mk(2, func(i int) float64 { return float64(10 + 90*(i%10/9)) }), // variable, always active
		mk(3, func(i int) float64 { return 50 }),                        // flat
		mk(4, func(i int) float64 { return float64(20 + i%7) }),         // mildly variable
	}}
	p := Table5Pair(tr)
	if len(p) != 2 || p[0].Row != 2 || p[1].Row != 4 {
		t.Fatalf("pair %d, %d; want rows 2 and 4", p[0].Row, p[1].Row)
	}
}
