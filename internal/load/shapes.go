// Package load drives the benchmark workloads with real clients: open-loop
// HTTP load through vegeta (no coordinated omission: requests leave on a
// precomputed schedule whatever the server does), and wrappers around wrk
// (nginx) and redis-benchmark (redis) that parse their output into the same
// Result. Load shapes follow Escra §VI-A, scaled to this machine.
package load

import (
	"fmt"
	"math"
	"math/rand"
	"time"
)

// Shape is a request-rate pattern. Schedule returns the send offsets of
// every request in [0, d), deterministic for a given shape (seeded).
type Shape interface {
	Name() string
	// Rate is the nominal rate (req/s) at offset t, for plots and tests.
	Rate(t time.Duration) float64
	Schedule(d time.Duration) []time.Duration
}

// Fixed sends at a constant rate, evenly spaced (Escra: 400 req/s).
type Fixed struct{ RPS float64 }

func (f Fixed) Name() string               { return "fixed" }
func (f Fixed) Rate(time.Duration) float64 { return f.RPS }
func (f Fixed) Schedule(d time.Duration) []time.Duration {
	if f.RPS <= 0 {
		return nil
	}
	n := int(d.Seconds() * f.RPS)
	out := make([]time.Duration, 0, n)
	for i := 0; ; i++ {
		t := time.Duration(float64(i) / f.RPS * float64(time.Second))
		if t >= d {
			return out
		}
		out = append(out, t)
	}
}

// Exp sends with exponentially distributed inter-arrival times of mean
// 1/RPS, a Poisson process (Escra: λ = 300 req/s).
type Exp struct {
	RPS  float64
	Seed int64
}

func (e Exp) Name() string               { return "exp" }
func (e Exp) Rate(time.Duration) float64 { return e.RPS }
func (e Exp) Schedule(d time.Duration) []time.Duration {
	return poisson(d, rand.New(rand.NewSource(e.Seed)), func(time.Duration) float64 { return e.RPS })
}

// Burst sends Base req/s evenly plus, for BurstLen of every Every, an
// additional Poisson stream of BurstRPS (Escra: 50 req/s plus a 10 s
// burst at λ = 600 every 20 s).
type Burst struct {
	Base, BurstRPS  float64
	Every, BurstLen time.Duration // 20 s and 10 s when zero
	Seed            int64
}

func (b Burst) Name() string { return "burst" }
func (b Burst) every() (time.Duration, time.Duration) {
	e, l := b.Every, b.BurstLen
	if e <= 0 {
		e = 20 * time.Second
	}
	if l <= 0 {
		l = 10 * time.Second
	}
	return e, l
}

// inBurst: the burst takes the second half of each cycle, so a run starts calm.
func (b Burst) inBurst(t time.Duration) bool {
	e, l := b.every()
	return t%e >= e-l
}

func (b Burst) Rate(t time.Duration) float64 {
	if b.inBurst(t) {
		return b.Base + b.BurstRPS
	}
	return b.Base
}

func (b Burst) Schedule(d time.Duration) []time.Duration {
	base := Fixed{RPS: b.Base}.Schedule(d)
	extra := poisson(d, rand.New(rand.NewSource(b.Seed)), func(t time.Duration) float64 {
		if b.inBurst(t) {
			return b.BurstRPS
		}
		return 0
	})
	return merge(base, extra)
}

// Trace is a bursty diurnal trace, sped up: one "day" lasts Period. The
// per-second rate is a raised cosine between Min and Max, multiplied by
// log-normal noise with memory (AR(1), so busy seconds cluster) and rare
// spikes, clamped to [Min, Max]; arrivals are Poisson at that rate. It is
// generated from Seed alone, so every policy sees the same trace. The Escra paper
// replays an Alibaba trace sped up 10× at 56–548 req/s; that trace is not
// available offline, so this is a synthetic stand-in with the same range.
type Trace struct {
	Min, Max float64
	Period   time.Duration // 120 s when zero
	Seed     int64
}

func (tr Trace) Name() string { return "trace" }

// perSecond returns the rate of each whole second up to d.
func (tr Trace) perSecond(d time.Duration) []float64 {
	period := tr.Period
	if period <= 0 {
		period = 120 * time.Second
	}
	rng := rand.New(rand.NewSource(tr.Seed ^ 0x5eed))
	n := int(math.Ceil(d.Seconds())) + 1
	out := make([]float64, n)
	ar := 0.0
	for i := range out {
		diurnal := 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/period.Seconds())
		ar = 0.8*ar + 0.25*rng.NormFloat64()
		mult := math.Exp(ar)
		if rng.Float64() < 0.05 {
			mult *= 1.5 + rng.Float64()
		}
		r := (tr.Min + (tr.Max-tr.Min)*diurnal) * mult
		out[i] = math.Min(tr.Max, math.Max(tr.Min, r))
	}
	return out
}

func (tr Trace) Rate(t time.Duration) float64 {
	ps := tr.perSecond(t + time.Second)
	return ps[int(t/time.Second)]
}

func (tr Trace) Schedule(d time.Duration) []time.Duration {
	ps := tr.perSecond(d)
	return poisson(d, rand.New(rand.NewSource(tr.Seed)), func(t time.Duration) float64 { return ps[int(t/time.Second)] })
}

// poisson draws arrivals of a Poisson process whose rate is piecewise
// constant per 100 ms step, using the memorylessness of the exponential:
// at a step boundary the remaining gap is redrawn at the new rate.
func poisson(d time.Duration, rng *rand.Rand, rate func(time.Duration) float64) []time.Duration {
	const step = 100 * time.Millisecond
	var out []time.Duration
	for s := time.Duration(0); s < d; s += step {
		r := rate(s)
		if r <= 0 {
			continue
		}
		end := min(s+step, d)
		t := s
		for {
			t += time.Duration(rng.ExpFloat64() / r * float64(time.Second))
			if t >= end {
				break
			}
			out = append(out, t)
		}
	}
	return out
}

func merge(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j >= len(b) || (i < len(a) && a[i] <= b[j]) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// SeedShapes returns the four shapes of Escra §VI-A with every rate
// multiplied by scale (the seed's rates are for 3 × 20-core workers; the
// driver picks scale per workload so the app needs ~0.3–1 of our 2 cores).
func SeedShapes(scale float64, seed int64) []Shape {
	return []Shape{
		Fixed{RPS: 400 * scale},
		Exp{RPS: 300 * scale, Seed: seed},
		Burst{Base: 50 * scale, BurstRPS: 600 * scale, Seed: seed},
		Trace{Min: 56 * scale, Max: 548 * scale, Seed: seed},
	}
}

// ShapeByName builds one of SeedShapes by name.
func ShapeByName(name string, scale float64, seed int64) (Shape, error) {
	for _, s := range SeedShapes(scale, seed) {
		if s.Name() == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown load shape %q (want fixed, exp, burst or trace)", name)
}
