// Package mu is `make bench-mu`: Mu's Table 3 (autoscalers on one
// function), Table 5 (two variable functions sharing a budget-bound
// cluster), the load-balancer comparison of §3.4.1 and the placement
// simulation of §3.5.3, on this machine's Docker engines through the
// Escra controller and escrad, at this machine's scale.
package mu

import (
	"math"
	"math/rand"
)

// TraceSpec describes a synthetic per-second rate trace shaped like the
// Azure Functions traces Mu replays (one minute of the trace per
// second): a daily cycle compressed into Period seconds, log-normal noise
// with memory (busy minutes cluster), and bursts of a few seconds. They
// stand in when no trace file is given (bench-mu -trace reads the real
// one, AzureTrace); they only share its rough statistics (range and mean
// of Table 4, a periodic component the predictor can learn), and are
// labelled synthetic wherever reported.
type TraceSpec struct {
	Seconds        int
	Mean, Min, Max float64
	Period         float64 // seconds per "day"
	Noise          float64 // σ of the AR(1) log noise
	BurstProb      float64 // chance per second that a burst starts
	Seed           int64
}

// Synthesize returns Seconds rates with the spec's mean, within [Min, Max].
func Synthesize(s TraceSpec) []float64 {
	rng := rand.New(rand.NewSource(s.Seed))
	if s.Period <= 0 {
		s.Period = 120
	}
	out := make([]float64, s.Seconds)
	ar, burst, mult := 0.0, 0, 1.0
	phase := rng.Float64() * 2 * math.Pi
	for i := range out {
		ar = 0.85*ar + s.Noise*rng.NormFloat64()
		if burst == 0 && rng.Float64() < s.BurstProb {
			burst, mult = 3+rng.Intn(10), 1.5+rng.Float64()*1.5
		}
		b := 1.0
		if burst > 0 {
			b = mult
			burst--
		}
		day := 1 + 0.45*math.Sin(2*math.Pi*float64(i)/s.Period+phase) + 0.15*math.Sin(4*math.Pi*float64(i)/s.Period)
		out[i] = day * math.Exp(ar) * b
	}
	// Fit the mean, then the range, a few times (clamping moves the mean).
	for range 8 {
		var m float64
		for _, v := range out {
			m += v
		}
		m /= float64(len(out))
		for i := range out {
			out[i] = math.Min(s.Max, math.Max(s.Min, out[i]*s.Mean/m))
		}
	}
	return out
}

// Stats is a trace's mean, min and max.
func Stats(r []float64) (mean, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range r {
		mean += v
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return mean / float64(len(r)), lo, hi
}

// openingRate is the mean rate of a trace's first 10 s.
func openingRate(rates []float64) float64 {
	m, _, _ := Stats(rates[:min(10, len(rates))])
	return m
}

// WarmUp is the segment a policy runs before a trace, unmeasured, so
// that every autoscaler meets the trace warm (its windows, estimators and
// predictor fed, no scale-from-zero overshoot held over into the trace):
// n seconds at the mean rate of the trace's first 10 s.
func WarmUp(rates []float64, n int) []float64 {
	if n <= 0 || len(rates) == 0 {
		return nil
	}
	m := openingRate(rates)
	out := make([]float64, n)
	for i := range out {
		out[i] = m
	}
	return out
}

// InitialReplicas is how many replicas every policy starts a trace with
// (Knative's initial-scale): what the opening rate needs at a replica's
// capacity, at least one.
func InitialReplicas(rates []float64, perReplica float64) int {
	if len(rates) == 0 || perReplica <= 0 {
		return 1
	}
	return max(1, int(math.Ceil(openingRate(rates)/perReplica-1e-9)))
}
