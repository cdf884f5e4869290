package mu

import (
	"fmt"
	"math"
	"sort"
)

// The machine's scale (docs/mu.md): Table 3's replica serves 20 req/s in
// a budget of 16, Table 5's 4 req/s in a budget of 6 per function.
const (
	// t3FitPeak puts the Table 3 segment's peak at 7 replicas' worth,
	// leaving the budget room to over-provision (the paper's RPS peaked
	// at 30 pods for an ideal of about 9).
	t3FitPeak = 140.0
	// t5FitPeak puts each Table 5 function's peak at its budget (6 × 4
	// req/s): the paper's two workloads together peaked just above the
	// 48 pods the cluster allowed.
	t5FitPeak = 24.0
	// t5PaperScale is Mu §4.1's: invocations divided by 100.
	t5PaperScale = 0.01
)

// tableTraces are the rate traces Tables 3 and 5 replay.
type tableTraces struct {
	label      string // "synthetic Azure-like" or the trace file's account
	t3, w1, w2 []float64
}

// pickTraces chooses Tables 3 and 5's functions from the trace (or the
// synthetic ones without a trace), logs every step and keeps it in sum.
func pickTraces(cfg Config, tr *AzureTrace, median *PredAccuracy, sum map[string]float64, logf func(string)) (tableTraces, error) {
	if tr == nil {
		w1, w2 := t5Traces(cfg)
		return tableTraces{label: "synthetic Azure-like", t3: t3Trace(cfg), w1: w1, w2: w2}, nil
	}
	tc := cfg.Trace
	tt := tableTraces{label: "Azure Functions"}
	minuteAs := max(1, tc.MinuteAs)
	if cfg.has("t3") {
		var f AzureFunction
		var note string
		if tc.Function != "" {
			var err error
			if f, note, err = tr.Pick(tc.Function); err != nil {
				return tt, err
			}
			note = "given: " + note
		} else {
			if median == nil {
				return tt, fmt.Errorf("%s: no function has %.0f invocations for Fig. 2's median (give -function)", tr.File, tc.MinInvocations)
			}
			f = tr.Fns[median.Row-1]
			note = fmt.Sprintf("Fig. 2's median function (MAE reduction %.2f%%), row %d", median.ReductionPct, median.Row)
		}
		seg, err := SegmentOf(f, cfg.T3Seconds, minuteAs, tc.Start, tc.Scale, t3FitPeak)
		seg.ScaleWhy = "-scale"
		if err != nil {
			return tt, fmt.Errorf("%s: Table 3: %w", tr.File, err)
		}
		logf("Table 3 function: " + note + "; " + seg.Describe())
		seg.Put(sum, "t3_trace")
		tt.t3 = seg.Rates
	}
	if cfg.has("t5") {
		pair := Table5Pair(tr)
		if len(pair) < 2 {
			return tt, fmt.Errorf("%s: Table 5 needs two functions, the file has %d", tr.File, len(tr.Fns))
		}
		// One clock for both (Mu §4.1 replays the two over the same
		// day): the window where their summed load varies most, unless
		// -start gives it.
		start, byRule := tc.Start, tc.Start < 0
		if byRule {
			var sd float64
			start, sd = PairWindow(pair[0], pair[1], max(1, (cfg.T5Seconds+minuteAs-1)/minuteAs))
			logf(fmt.Sprintf("Table 5 window: minutes from %d, %s of rows %d and %d summed (sd %.1f invocations/min)", start+1, WindowRule, pair[0].Row, pair[1].Row, sd))
			sum["t5_trace_start_minute"], sum["t5_trace_window_by_rule"] = float64(start+1), 1
		}
		for i, f := range pair {
			// ÷ 100 as the paper when the segment then fits the budget,
			// else fitted to it.
			seg, err := SegmentOf(f, cfg.T5Seconds, minuteAs, start, t5PaperScale, 0)
			seg.ScaleWhy = "Mu §4.1's ÷ 100"
			if err == nil && seg.Peak > t5FitPeak {
				seg, err = SegmentOf(f, cfg.T5Seconds, minuteAs, start, 0, t5FitPeak)
			}
			seg.ByRule = byRule
			if err != nil {
				return tt, fmt.Errorf("%s: Table 5 W%d: %w", tr.File, i+1, err)
			}
			logf(fmt.Sprintf("Table 5 W%d: of the 10 functions with the highest peak, the %s (CV %.2f, invoked in %.0f%% of the minutes); %s", i+1, []string{"most variable", "second most variable"}[i], f.CV(), 100*f.ActiveShare(), seg.Describe()))
			seg.Put(sum, fmt.Sprintf("t5_w%d_trace", i+1))
			if i == 0 {
				tt.w1 = seg.Rates
			} else {
				tt.w2 = seg.Rates
			}
		}
	}
	return tt, nil
}

// Table5Pair is Mu §4.1's choice: two functions "with variable invocation
// patterns" from the top 10 by maximum invocations per minute; here the
// two with the highest coefficient of variation among those invoked in at
// least 90 % of the minutes. Without that, the highest CVs are functions
// that are silent most of the day (one of this sample's top 10 runs in 14
// minutes of 1440), whose replay is silence with a spike, not the
// sustained load of the paper's two (154 and 146 req/s on average at ÷ 100).
// Fewer than two such functions: the top 10 regardless.
func Table5Pair(tr *AzureTrace) []AzureFunction {
	top := tr.TopByPeak(10)
	var busy []AzureFunction
	for _, f := range top {
		if f.ActiveShare() >= 0.9 {
			busy = append(busy, f)
		}
	}
	if len(busy) < 2 {
		busy = top
	}
	sort.SliceStable(busy, func(i, j int) bool { return busy[i].CV() > busy[j].CV() })
	return busy[:min(2, len(busy))]
}

// ActiveShare is the fraction of minutes with at least one invocation.
func (f AzureFunction) ActiveShare() float64 {
	n := 0
	for _, c := range f.Counts {
		if c > 0 {
			n++
		}
	}
	return float64(n) / float64(max(1, len(f.Counts)))
}

// IdealPods is Fig. 3's ideal replica count each second: the known
// arrival rate over one replica's service rate, rounded up.
func IdealPods(rates []float64, perReplica float64) []int {
	out := make([]int, len(rates))
	for i, r := range rates {
		out[i] = int(math.Ceil(r/perReplica - 1e-9))
	}
	return out
}
