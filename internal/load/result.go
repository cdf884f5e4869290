package load

import (
	"math"
	"sort"
	"time"
)

// Result is what a client measured in one run; the same for vegeta, wrk
// and redis-benchmark so the report treats them alike.
type Result struct {
	Tool          string  `json:"tool"`  // vegeta, wrk, redis-benchmark
	Shape         string  `json:"shape"` // fixed, exp, burst, trace, closed (wrk/redis-benchmark)
	Test          string  `json:"test,omitempty"`
	Requests      int64   `json:"requests"`
	Successes     int64   `json:"successes"`
	DurationS     float64 `json:"duration_s"`
	ThroughputRPS float64 `json:"throughput_rps"` // successful requests per second
	MeanUs        float64 `json:"mean_us"`
	P50Us         float64 `json:"p50_us"`
	P99Us         float64 `json:"p99_us"`
	P999Us        float64 `json:"p999_us"`
	MaxUs         float64 `json:"max_us"`
}

// Quantile of sorted durations, nearest-rank (the smallest value with at
// least q of the samples at or below it).
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// fillLatencies sets the latency fields from raw latencies (sorted in place).
func (r *Result) fillLatencies(lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	r.MeanUs = us(sum) / float64(len(lat))
	r.P50Us = us(Quantile(lat, 0.5))
	r.P99Us = us(Quantile(lat, 0.99))
	r.P999Us = us(Quantile(lat, 0.999))
	r.MaxUs = us(lat[len(lat)-1])
}
