package recommender

import (
	"math"
	"time"
)

// VPA-style recommender, after the Kubernetes Vertical Pod Autoscaler's
// documented recommender (autoscaler/vertical-pod-autoscaler, "recommender"):
//
//   - CPU: every usage sample goes into a decaying histogram with exponential
//     buckets (first bucket 0.01 cores, ratio 1.05); weight 2^((t-t0)/halfLife).
//     Target = p90.
//   - Memory: the peak of each aggregation interval is one sample in its own
//     decaying histogram (first bucket 10 MB, ratio 1.05). Target = p90 of
//     the peaks. After an OOM kill the peak of the interval is raised to
//     max(1.2·usage, usage + 100 MiB).
//   - Both targets get the 15 % safety margin and a floor.
//   - Percentile answers the upper bound of the bucket it falls in.
//
// VPA's half-life is 24 h and its memory interval 24 h; a benchmark of
// minutes needs them scaled down, so both are configurable. The updater
// applies the target every Interval (60 s or 10 s in the benchmarks).
type VPA struct {
	cfg      VPAConfig
	cpu, mem *DecayingHistogram
	peak     float64   // memory peak of the open interval
	peakEnd  time.Time // end of the open interval
	seen     bool
}

type VPAConfig struct {
	HalfLife       time.Duration // 24 h in VPA
	MemAggInterval time.Duration // 24 h in VPA
	Every          time.Duration // updater period
	CPUPercentile  float64       // 0.9
	MemPercentile  float64       // 0.9
	SafetyMargin   float64       // 0.15
	MinCPU         float64       // 0.025 cores in VPA
	MinMem         float64       // 250 MiB in VPA; smaller here
	OOMBumpRatio   float64       // 1.2
	OOMMinBump     float64       // 100 MiB
	Label          string
}

// DefaultVPA scales VPA's day-long constants down to a minutes-long benchmark.
func DefaultVPA(every time.Duration) VPAConfig {
	return VPAConfig{
		HalfLife: 60 * time.Second, MemAggInterval: 10 * time.Second, Every: every,
		CPUPercentile: 0.9, MemPercentile: 0.9, SafetyMargin: 0.15,
		MinCPU: 0.025, MinMem: 16 << 20, OOMBumpRatio: 1.2, OOMMinBump: 100 << 20,
	}
}

func NewVPA(cfg VPAConfig) *VPA {
	return &VPA{cfg: cfg,
		cpu: NewDecayingHistogram(0.01, 1.05, 1000, cfg.HalfLife),
		mem: NewDecayingHistogram(1e7, 1.05, 1e12, cfg.HalfLife)}
}

func (v *VPA) Name() string {
	if v.cfg.Label != "" {
		return v.cfg.Label
	}
	return "vpa" + itoa(int(v.cfg.Every/time.Second))
}
func (v *VPA) Interval() time.Duration { return v.cfg.Every }

func (v *VPA) Observe(s Sample) {
	v.closeInterval(s.T)
	v.cpu.Add(s.CPU, 1, s.T)
	v.peak = math.Max(v.peak, s.MemBytes)
	v.seen = true
}

func (v *VPA) closeInterval(t time.Time) {
	if v.peakEnd.IsZero() {
		v.peakEnd = t.Add(v.cfg.MemAggInterval)
		return
	}
	if !t.Before(v.peakEnd) {
		if v.peak > 0 {
			v.mem.Add(v.peak, 1, v.peakEnd)
		}
		v.peak = 0
		for !t.Before(v.peakEnd) {
			v.peakEnd = v.peakEnd.Add(v.cfg.MemAggInterval)
		}
	}
}

func (v *VPA) ObserveOOM(t time.Time, mem float64) {
	v.closeInterval(t)
	v.peak = math.Max(v.peak, math.Max(mem*v.cfg.OOMBumpRatio, mem+v.cfg.OOMMinBump))
	v.seen = true
}

func (v *VPA) Recommend(now time.Time) (Limits, bool) {
	if !v.seen {
		return Limits{}, false
	}
	v.closeInterval(now)
	m := 1 + v.cfg.SafetyMargin
	l := Limits{CPU: math.Max(v.cfg.MinCPU, m*v.cpu.Percentile(v.cfg.CPUPercentile))}
	// The open interval's peak counts too, as VPA's aggregate does before it rolls.
	memP := v.mem.Percentile(v.cfg.MemPercentile)
	if v.mem.Empty() {
		memP = v.peak
	}
	l.MemBytes = math.Max(v.cfg.MinMem, m*memP)
	return l, true
}

// DecayingHistogram is VPA's histogram with exponentially growing buckets
// and exponentially decaying sample weights.
type DecayingHistogram struct {
	first, ratio float64
	weights      []float64
	halfLife     time.Duration
	ref          time.Time
	total        float64
}

// NewDecayingHistogram: bucket i spans [start(i), start(i+1)) with
// start(i) = first·(ratio^i − 1)/(ratio − 1); the last bucket holds max.
func NewDecayingHistogram(first, ratio, max float64, halfLife time.Duration) *DecayingHistogram {
	n := int(math.Ceil(math.Log(max*(ratio-1)/first+1)/math.Log(ratio))) + 1
	return &DecayingHistogram{first: first, ratio: ratio, weights: make([]float64, n), halfLife: halfLife}
}

func (h *DecayingHistogram) bucketStart(i int) float64 {
	return h.first * (math.Pow(h.ratio, float64(i)) - 1) / (h.ratio - 1)
}

func (h *DecayingHistogram) bucket(v float64) int {
	if v < h.first {
		return 0
	}
	i := int(math.Floor(math.Log(v*(h.ratio-1)/h.first+1) / math.Log(h.ratio)))
	// Guard against rounding at bucket edges.
	for i > 0 && h.bucketStart(i) > v {
		i--
	}
	for i+1 < len(h.weights) && h.bucketStart(i+1) <= v {
		i++
	}
	if i >= len(h.weights) {
		i = len(h.weights) - 1
	}
	return i
}

// Add adds v with weight w·2^((t − ref)/halfLife). The reference moves
// forward (rescaling all weights) before the factor grows large.
func (h *DecayingHistogram) Add(v, w float64, t time.Time) {
	if math.IsNaN(v) || v < 0 {
		return
	}
	if h.ref.IsZero() {
		h.ref = t
	}
	exp := t.Sub(h.ref).Seconds() / h.halfLife.Seconds()
	if exp > 50 {
		scale := math.Exp2(-exp)
		h.total = 0
		for i := range h.weights {
			h.weights[i] *= scale
			h.total += h.weights[i]
		}
		h.ref, exp = t, 0
	}
	f := w * math.Exp2(exp)
	h.weights[h.bucket(v)] += f
	h.total += f
}

func (h *DecayingHistogram) Empty() bool { return h.total <= 0 }

// Percentile returns the upper bound of the bucket holding quantile q.
func (h *DecayingHistogram) Percentile(q float64) float64 {
	if h.total <= 0 {
		return 0
	}
	acc := 0.0
	for i, w := range h.weights {
		acc += w
		if acc >= q*h.total*(1-1e-12) {
			if i == len(h.weights)-1 {
				return h.bucketStart(i)
			}
			return h.bucketStart(i + 1)
		}
	}
	return h.bucketStart(len(h.weights) - 1)
}
