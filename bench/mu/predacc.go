package mu

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/escra-dev/escra/bench/pema"
	"github.com/escra-dev/escra/controller/mu"
)

// PaperMinInvocations is Mu §3.2's selection for Fig. 2: functions with
// at least 100,000 invocations in the day.
const PaperMinInvocations = 100_000

// PredAccuracy is one function's next-minute prediction error (Mu §3.2,
// Fig. 2): the mean absolute error of Mu's predictor (controller/mu,
// Algorithm 2 with the paper's 50 models) and of the naive "next = this
// minute", over minutes 2..N, and the reduction in percent.
type PredAccuracy struct {
	Row          int
	Hash         string
	Total        float64
	MAEMu        float64
	MAENaive     float64
	ReductionPct float64 // 100 (naive − mu) / naive; 0 when naive is exact
}

// PredictorAccuracy runs the predictor over one function's minutes.
func PredictorAccuracy(f AzureFunction) PredAccuracy {
	p := mu.NewPredictor(mu.DefaultPredictorConfig())
	a := PredAccuracy{Row: f.Row, Hash: f.Hash, Total: f.Total()}
	var eMu, eNaive float64
	n := 0
	pred := 0.0
	for i, c := range f.Counts {
		if i > 0 {
			eMu += math.Abs(c - pred)
			eNaive += math.Abs(c - f.Counts[i-1])
			n++
		}
		pred = p.Observe(c)
	}
	if n > 0 {
		a.MAEMu, a.MAENaive = eMu/float64(n), eNaive/float64(n)
	}
	if a.MAENaive > 0 {
		a.ReductionPct = 100 * (a.MAENaive - a.MAEMu) / a.MAENaive
	}
	return a
}

// PredictorAccuracies is Fig. 2 over every function of t with at least
// minTotal invocations, sorted by reduction (lowest first; ties by row).
func PredictorAccuracies(t *AzureTrace, minTotal float64) []PredAccuracy {
	var out []PredAccuracy
	for _, f := range t.Fns {
		if f.Total() >= minTotal {
			out = append(out, PredictorAccuracy(f))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ReductionPct < out[j].ReductionPct })
	return out
}

// MedianFunction is the function at the median of the reductions, the
// one Mu §3.3 runs Table 3 on ("we do not select workloads favorable to
// our predictor"); for an even count, the lower of the two middle ones.
func MedianFunction(accs []PredAccuracy) (PredAccuracy, bool) {
	if len(accs) == 0 {
		return PredAccuracy{}, false
	}
	return accs[(len(accs)-1)/2], true
}

// samePct is the band within which a function counts as "no improvement"
// (Mu §3.2 counts 22 such functions).
const samePct = 0.1

// PutPredictor stores Fig. 2's figures in the summary.
func PutPredictor(sum map[string]float64, accs []PredAccuracy, minTotal float64) {
	sum["predictor_min_invocations"] = minTotal
	sum["predictor_functions"] = float64(len(accs))
	if len(accs) == 0 {
		return
	}
	var worse, same, better int
	var betterSum float64
	for _, a := range accs {
		switch {
		case a.ReductionPct <= -samePct:
			worse++
		case a.ReductionPct >= samePct:
			better++
			betterSum += a.ReductionPct
		default:
			same++
		}
	}
	med, _ := MedianFunction(accs)
	sum["predictor_mae_reduction_median_pct"] = med.ReductionPct
	sum["predictor_median_row"] = float64(med.Row)
	sum["predictor_functions_worse"] = float64(worse)
	sum["predictor_functions_same"] = float64(same)
	sum["predictor_functions_better"] = float64(better)
	if better > 0 {
		sum["predictor_better_mean_reduction_pct"] = betterSum / float64(better)
	}
}

// WritePredictor writes predictor_accuracy.csv and Fig. 2 as a CDF
// (fig2_predictor_cdf.svg) into each of dirs.
func WritePredictor(accs []PredAccuracy, title string, dirs ...string) error {
	var csv []byte
	csv = append(csv, "row,hash,invocations,mae_mu,mae_naive,reduction_pct\n"...)
	x, y := make([]float64, len(accs)), make([]float64, len(accs))
	for i, a := range accs {
		csv = fmt.Appendf(csv, "%d,%s,%.0f,%.3f,%.3f,%.2f\n", a.Row, a.Hash, a.Total, a.MAEMu, a.MAENaive, a.ReductionPct)
		x[i], y[i] = a.ReductionPct, float64(i+1)/float64(len(accs))
	}
	svg := pema.SVG(title, "reduction in mean absolute error vs naive (%)", "fraction of functions (CDF)",
		[]pema.Series{{Name: "Mu predictor", X: x, Y: y}}, map[string]float64{})
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "predictor_accuracy.csv"), csv, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "fig2_predictor_cdf.svg"), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}
