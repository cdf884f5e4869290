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

// Each repetition has its own order, every policy once, and a seed
// replays it.
func TestRepOrderShufflesEachRepetition(t *testing.T) {
	pols := []string{"rps", "concurrency", "mu_nopred", "mu", "mu_noadm"}
	firsts := map[string]bool{}
	for r := 1; r <= 20; r++ {
		o := repOrder(pols, 7, r)
		if len(o) != len(pols) {
			t.Fatalf("rep %d: %v", r, o)
		}
		seen := map[string]bool{}
		for _, p := range o {
			seen[p] = true
		}
		if len(seen) != len(pols) {
			t.Fatalf("rep %d: %v is not a permutation of %v", r, o, pols)
		}
		again := repOrder(pols, 7, r)
		for i := range o {
			if o[i] != again[i] {
				t.Fatalf("rep %d: seed 7 gave %v then %v", r, o, again)
			}
		}
		firsts[o[0]] = true
	}
	if len(firsts) < 3 {
		t.Fatalf("20 repetitions started with only %v", firsts)
	}
	if pols[0] != "rps" {
		t.Fatal("repOrder shuffled its argument")
	}
}

// Repetitions are summarised by their mean with a t interval, the worst
// peak, and a paired comparison.
func TestPutRepsAndPaired(t *testing.T) {
	a := []Outcome{{WithinSLOPct: 98, PodsAvg: 6, PodsMax: 11, P99Ms: 900}, {WithinSLOPct: 99, PodsAvg: 6, PodsMax: 12, P99Ms: 1000}, {WithinSLOPct: 97, PodsAvg: 6, PodsMax: 10, P99Ms: 1100}}
	b := []Outcome{{WithinSLOPct: 97, PodsAvg: 12, PodsMax: 16}, {WithinSLOPct: 99.5, PodsAvg: 12, PodsMax: 16}, {WithinSLOPct: 95, PodsAvg: 12, PodsMax: 15}}
	sum := map[string]float64{}
	putReps(sum, "mu", a)
	// mean 98, sd 1, t(2) = 4.303: half-width 4.303/√3.
	if sum["mu_within_slo_pct"] != 98 || math.Abs(sum["mu_within_slo_pct_ci95"]-4.303/math.Sqrt(3)) > 1e-9 {
		t.Fatalf("within %v ± %v", sum["mu_within_slo_pct"], sum["mu_within_slo_pct_ci95"])
	}
	if sum["mu_pods_max"] != 12 || sum["mu_pods_max_mean"] != 11 || sum["mu_p99_ms"] != 1000 || sum["mu_pods_avg_ci95"] != 0 {
		t.Fatalf("%v", sum)
	}
	putPaired(sum, "mu_vs_concurrency", a, b)
	// Differences +1, −0.5, +2: mean 0.8333, won 2 of 3, pods ratio ½.
	if math.Abs(sum["mu_vs_concurrency_within_slo_pp"]-2.5/3) > 1e-9 || sum["mu_vs_concurrency_within_slo_reps_won"] != 2 ||
		math.Abs(sum["mu_vs_concurrency_pods_avg_ratio"]-0.5) > 1e-9 || sum["mu_vs_concurrency_within_slo_pp_ci95"] <= 0 {
		t.Fatalf("%v", sum)
	}
	one := map[string]float64{}
	putReps(one, "rps", b[:1])
	if _, ok := one["rps_within_slo_pct_ci95"]; ok || one["rps_within_slo_pct"] != 97 {
		t.Fatalf("one repetition: %v", one)
	}
}

// The warm-up is not measured: its requests and seconds are dropped and
// the rest are put on the trace's clock.
func TestWarmUpIsNotMeasured(t *testing.T) {
	s := time.Second
	rs := measured([]rec{{At: 0}, {At: 19 * s}, {At: 20 * s, Code: 200}, {At: 25 * s, Code: 503}}, 20)
	if len(rs) != 2 || rs[0].At != 0 || rs[1].At != 5*s || rs[1].Code != 503 {
		t.Fatalf("measured: %+v", rs)
	}
	ser := &series{Ready: []int{1, 2, 3, 4}, Desired: []int{1, 2, 3, 4}, Rate: []float64{1, 2, 3, 4},
		Rows: []string{"1,1,0", "2,2,0", "3,3,0", "4,4,0"}}
	ser.trim(2)
	if len(ser.Ready) != 2 || ser.Ready[0] != 3 || ser.Rows[0] != "1,3,0" || ser.Rows[1] != "2,4,0" {
		t.Fatalf("trim: %+v", ser)
	}
	w := WarmUp([]float64{10, 20, 30}, 3)
	if len(w) != 3 || w[0] != 20 || w[2] != 20 {
		t.Fatalf("WarmUp: %v", w)
	}
	if n := InitialReplicas([]float64{33, 33}, 20); n != 2 {
		t.Fatalf("InitialReplicas(33 req/s, 20 per replica) = %d", n)
	}
	if WarmUp([]float64{10}, 0) != nil || InitialReplicas(nil, 20) != 1 {
		t.Fatal("no warm-up asked, or no trace")
	}
}
