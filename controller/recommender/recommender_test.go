package recommender

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestStatic(t *testing.T) {
	for _, c := range []struct {
		k    float64
		name string
	}{{1.5, "static15"}, {1, "static10"}, {0.75, "static075"}} {
		s := &Static{K: c.k, PeakCPU: 0.8, PeakMem: 200 << 20}
		if s.Name() != c.name {
			t.Errorf("name of k=%v: %q, want %q", c.k, s.Name(), c.name)
		}
		l, ok := s.Recommend(t0)
		if !ok {
			t.Fatal("static with a peak must recommend")
		}
		near(t, "cpu", l.CPU, c.k*0.8)
		near(t, "mem", l.MemBytes, c.k*(200<<20))
	}
	if _, ok := (&Static{K: 1.5}).Recommend(t0); ok {
		t.Error("static without a profiled peak must not recommend")
	}
}

func TestAutopilotWeightedPercentileDecays(t *testing.T) {
	// Samples 10 at t=0 and 1 at t=2. Half-life 1 s: weights at t=2 are
	// 0.25 and 1, so p70 (0.7·1.25 = 0.875 ≤ 1) is 1. Without decay the
	// weights are 1 and 1 and p70 (1.4 > 1) is 10.
	for _, c := range []struct {
		hl   time.Duration
		want float64
	}{{time.Second, 1}, {0, 10}} {
		s := NewAutopilotSeries(AutopilotConfig{Window: time.Minute, HalfLife: c.hl})
		s.Observe(at(0), 10)
		s.Observe(at(2), 1)
		near(t, "p70 half-life "+c.hl.String(), s.stat(Arm{Stat: "p70", Q: 0.7, Margin: 1}, at(2)), c.want)
	}
}

func apCfg(wswitch float64) AutopilotConfig {
	return AutopilotConfig{
		Window: 100 * time.Second, HalfLife: 0, // no decay: equal weights
		Arms: []Arm{{Stat: "max", Q: 1, Margin: 1}, {Stat: "p50", Q: 0.5, Margin: 1}},
		D:    0.5, Wo: 10, Wu: 1, WSwitch: wswitch,
	}
}

// runAutopilot feeds the hand-computed scenario of TestAutopilotSelector.
func runAutopilot(t *testing.T, s *AutopilotSeries) float64 {
	obs := func(from, to int, v float64) {
		for i := from; i <= to; i++ {
			s.Observe(at(float64(i)), v)
		}
	}
	obs(0, 3, 1)
	l, _ := s.Update(at(3.5)) // no costs yet: safest (largest) arm, both say 1
	near(t, "limit 1", l, 1)
	obs(4, 5, 2)
	l, _ = s.Update(at(5.5)) // both overran by 1+1: c = 0.5·10·2 = 10 each; tie → max arm, rec 2
	near(t, "limit 2", l, 2)
	if a, _ := s.Selected(); a.Stat != "max" {
		t.Fatalf("after update 2 arm %q, want max", a.Stat)
	}
	near(t, "cost max after 2", s.cost[0], 10)
	near(t, "cost p50 after 2", s.cost[1], 10)
	obs(6, 7, 2)
	l, _ = s.Update(at(7.5)) // max (prev 2): c = 5; p50 (prev 1): overrun 2 → c = 5 + 10 = 15
	near(t, "cost max after 3", s.cost[0], 5)
	near(t, "cost p50 after 3", s.cost[1], 15)
	near(t, "limit 3", l, 2)
	obs(8, 27, 0.5)
	// max (prev 2): underrun 20·1.5 = 30 → c = 2.5 + 15 = 17.5
	// p50 (prev 1): underrun 20·0.5 = 10 → c = 7.5 + 5 = 12.5; p50 now is 0.5
	l, _ = s.Update(at(27.5))
	near(t, "cost max after 4", s.cost[0], 17.5)
	near(t, "cost p50 after 4", s.cost[1], 12.5)
	return l
}

func TestAutopilotSelector(t *testing.T) {
	s := NewAutopilotSeries(apCfg(0))
	near(t, "limit 4 (switches to p50)", runAutopilot(t, s), 0.5)
	if a, _ := s.Selected(); a.Stat != "p50" {
		t.Errorf("arm %q, want p50", a.Stat)
	}
	// A switching cost of 10 makes p50 cost 22.5 > 17.5: keep max, whose limit is 2.
	s = NewAutopilotSeries(apCfg(10))
	near(t, "limit 4 (sticks to max)", runAutopilot(t, s), 2)
}

func TestAutopilotWindowForgetsOldPeak(t *testing.T) {
	cfg := apCfg(0)
	cfg.Window = 10 * time.Second
	cfg.Arms = cfg.Arms[:1] // max only
	s := NewAutopilotSeries(cfg)
	s.Observe(at(0), 4)
	s.Observe(at(1), 1)
	l, _ := s.Update(at(1))
	near(t, "max inside window", l, 4)
	s.Observe(at(12), 1)
	l, _ = s.Update(at(12))
	near(t, "max after the peak left the window", l, 1)
}

func TestAutopilotBothResources(t *testing.T) {
	a := NewAutopilot(DefaultAutopilotCPU(), DefaultAutopilotMem(), time.Second)
	if _, ok := a.Recommend(t0); ok {
		t.Fatal("no samples: no recommendation")
	}
	for i := 0; i < 30; i++ {
		a.Observe(Sample{T: at(float64(i) * 0.1), CPU: 0.5, MemBytes: 100 << 20})
	}
	l, ok := a.Recommend(at(3))
	if !ok {
		t.Fatal("want a recommendation")
	}
	// Constant usage: the first pick is the largest arm, 1.25 × usage.
	near(t, "cpu", l.CPU, 0.625)
	near(t, "mem", l.MemBytes, 1.25*(100<<20))
}

func TestDecayingHistogram(t *testing.T) {
	// first 1, ratio 2: buckets [0,1) [1,3) [3,7) [7,15) ...
	h := NewDecayingHistogram(1, 2, 100, time.Hour)
	for v, want := range map[float64]int{0.5: 0, 1: 1, 2.9: 1, 3: 2, 6.9: 2, 7: 3, 1e9: len(h.weights) - 1} {
		if got := h.bucket(v); got != want {
			t.Errorf("bucket(%v) = %d, want %d", v, got, want)
		}
	}
	h.Add(0.5, 1, t0)
	h.Add(2, 1, t0)
	h.Add(5, 2, t0)
	near(t, "p50 (weight 2 of 4 reached in [1,3))", h.Percentile(0.5), 3)
	near(t, "p90", h.Percentile(0.9), 7)

	// Decay: 5 at t=0, 0.5 at t=10 s with half-life 10 s weighs twice as much.
	h = NewDecayingHistogram(1, 2, 100, 10*time.Second)
	h.Add(5, 1, t0)
	h.Add(0.5, 1, at(10))
	near(t, "decayed p50", h.Percentile(0.5), 1)
	near(t, "decayed p70", h.Percentile(0.7), 7)
	// Moving the reference far forward keeps the proportions.
	h.Add(0.5, 1, at(10*60)) // 2^60 relative weight: rescale path
	near(t, "after rescale p50", h.Percentile(0.5), 1)
}

func TestVPA(t *testing.T) {
	v := NewVPA(DefaultVPA(10 * time.Second))
	if v.Name() != "vpa10" {
		t.Errorf("name %q", v.Name())
	}
	for i := 0; i <= 10; i++ {
		v.Observe(Sample{T: at(float64(i)), CPU: 0.5, MemBytes: 100 << 20})
	}
	l, ok := v.Recommend(at(10))
	if !ok {
		t.Fatal("want a recommendation")
	}
	// CPU 0.5 lies in bucket 25 of first=0.01, ratio=1.05 buckets
	// (start(i) = 0.2·(1.05^i − 1): start(25) = 0.4773, start(26) = 0.5111);
	// p90 answers the bucket's upper bound 0.5111; ×1.15 = 0.5878.
	near(t, "cpu target", l.CPU, 0.5878047182272018)
	// One closed 10 s interval with peak 100 MiB = 104857600 B in bucket 8
	// of first=1e7 buckets (start(9) = 110265643.2); ×1.15.
	near(t, "mem target", l.MemBytes, 126805489.67505862)

	// OOM at 150 MiB: the interval's peak becomes max(1.2·150, 150+100) MiB = 250 MiB,
	// which dominates p90 once the interval closes.
	v.ObserveOOM(at(12), 150<<20)
	l, _ = v.Recommend(at(21))
	// The bucket's upper bound is at most 5 % + first (1e7) above the value.
	if lo, hi := 1.15*(250<<20), 1.15*(1.05*(250<<20)+1e7); l.MemBytes < lo || l.MemBytes > hi {
		t.Errorf("mem after OOM %v, want in [%v,%v]", l.MemBytes, lo, hi)
	}
}

func TestVPAOpenIntervalBeforeFirstPeak(t *testing.T) {
	v := NewVPA(DefaultVPA(60 * time.Second))
	v.Observe(Sample{T: t0, CPU: 0.001, MemBytes: 1 << 20})
	l, ok := v.Recommend(at(1))
	if !ok {
		t.Fatal("want a recommendation")
	}
	near(t, "cpu floor", l.CPU, 0.025)
	near(t, "mem floor", l.MemBytes, 16<<20)
}
