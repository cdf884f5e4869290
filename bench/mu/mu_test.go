package mu

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestSynthesizeFitsMeanAndRange(t *testing.T) {
	r := Synthesize(TraceSpec{Seconds: 600, Mean: 20, Min: 5.3, Max: 30, Period: 90, Noise: 0.2, BurstProb: 0.04, Seed: 1})
	m, lo, hi := Stats(r)
	if len(r) != 600 || math.Abs(m-20) > 1 || lo < 5.3 || hi > 30 {
		t.Fatalf("trace: %d s, mean %.2f, range %.1f–%.1f; want 600 s, mean 20±1 within 5.3–30", len(r), m, lo, hi)
	}
	// Not flat: the daily cycle and bursts span most of the range.
	if hi-lo < 10 {
		t.Fatalf("range %.1f–%.1f is too flat for an Azure-like trace", lo, hi)
	}
	again := Synthesize(TraceSpec{Seconds: 600, Mean: 20, Min: 5.3, Max: 30, Period: 90, Noise: 0.2, BurstProb: 0.04, Seed: 1})
	for i := range r {
		if r[i] != again[i] {
			t.Fatal("same seed, different trace")
		}
	}
}

// 503s count as SLO misses but not in the latency percentiles.
func TestSummarise(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rs := []rec{{Lat: ms(100), Code: 200}, {Lat: ms(2000), Code: 200}, {Lat: ms(1), Code: http.StatusServiceUnavailable}, {Lat: ms(50), Code: 0}}
	o := summarise(rs, time.Second)
	if o.WithinSLOPct != 25 || o.Pct503 != 25 || o.ErrPct != 25 || len(o.Lat) != 3 || o.P99Ms != 2000 {
		t.Fatalf("%+v", o)
	}
}
