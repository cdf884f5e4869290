package report

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// BootstrapResamples and BootstrapSeed fix the percentile bootstrap, so the
// same results.json always gives the same intervals.
const (
	BootstrapResamples = 2000
	BootstrapSeed      = 0x65736372 // "escr"
)

// seedFor derives a per-figure seed from its names, so an interval does not
// depend on which other cells or policies the run has.
func seedFor(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(BootstrapSeed, seed)) }

// resampleMean is the mean of len(xs) draws from xs with replacement.
func resampleMean(rng *rand.Rand, xs []float64) float64 {
	s := 0.0
	for range xs {
		s += xs[rng.IntN(len(xs))]
	}
	return s / float64(len(xs))
}

// ci95 is the 2.5/97.5 percentile interval of the resampled estimates;
// NaN when over 5 % of them were undefined (a baseline resample of ~0),
// since the rest would then be a conditioned, not a bootstrap, sample.
func ci95(est []float64) (lo, hi float64) {
	var ok []float64
	for _, v := range est {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 || len(ok) < len(est)*95/100 {
		return math.NaN(), math.NaN()
	}
	return Percentile(ok, 0.025), Percentile(ok, 0.975)
}

// bootstrapCell is the 95 % percentile-bootstrap interval of one cell's
// percentage: both sides' repetitions resampled independently, the
// percentage recomputed from the resampled means. NaN with fewer than two
// repetitions a side (a one-point resample says nothing about spread).
func bootstrapCell(m Metric, escra, base []float64, seed uint64) (lo, hi float64) {
	if len(escra) < 2 || len(base) < 2 {
		return math.NaN(), math.NaN()
	}
	rng := newRand(seed)
	est := make([]float64, BootstrapResamples)
	for i := range est {
		b := resampleMean(rng, base)
		est[i] = m.pct(b, resampleMean(rng, escra))
	}
	return ci95(est)
}

// bootstrapMean is the interval of the mean percentage over cells: each
// resample resamples the repetitions of both sides in every cell whose
// percentage is defined and averages the recomputed percentages. A cell
// with one repetition a side enters every resample unchanged.
func bootstrapMean(m Metric, j int, cells []Delta, seed uint64) (lo, hi float64) {
	var use []Delta
	for _, d := range cells {
		if d.e != nil && d.b != nil && !math.IsNaN(d.values()[j]) {
			use = append(use, d)
		}
	}
	if len(use) == 0 {
		return math.NaN(), math.NaN()
	}
	rng := newRand(seed)
	est := make([]float64, BootstrapResamples)
	for i := range est {
		sum := 0.0
		for _, d := range use {
			b := resampleMean(rng, d.b.samples[m.raw])
			sum += m.pct(b, resampleMean(rng, d.e.samples[m.raw]))
		}
		est[i] = sum / float64(len(use)) // NaN if any cell's resample was undefined
	}
	return ci95(est)
}
