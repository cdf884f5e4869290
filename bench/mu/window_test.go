package mu

import (
	"math"
	"testing"
)

// The window rule picks where the rate moves, on any row: a steady level
// with one varying stretch, a function idle but for a burst, a constant
// function (the busiest, then the earliest window), a window longer
// than the trace.
func TestMostVariedWindow(t *testing.T) {
	mk := func(n int, f func(i int) float64) []float64 {
		c := make([]float64, n)
		for i := range c {
			c[i] = f(i)
		}
		return c
	}
	// 840 a minute all day but minutes 600..719, which swing 400..1200.
	swing := mk(1440, func(i int) float64 {
		if i >= 600 && i < 720 {
			return 800 + 400*math.Sin(float64(i)/5)
		}
		return 840
	})
	if s, sd := MostVariedWindow(swing, 120); s != 600 || sd < 250 {
		t.Errorf("swing: start %d sd %.0f, want 600 and ≥ 250", s, sd)
	}
	// The same volume, steady for 200 minutes, then alternating: the
	// rule is the variation, not the volume.
	twoHalves := mk(400, func(i int) float64 {
		if i < 200 {
			return 150
		}
		return 100 + 100*float64(i%2)
	})
	if s, _ := MostVariedWindow(twoHalves, 100); s < 200 {
		t.Errorf("two halves: start %d, want the varying half (≥ 200)", s)
	}
	// Idle but for minutes 50..52.
	burst := mk(200, func(i int) float64 {
		if i >= 50 && i < 53 {
			return 300
		}
		return 0
	})
	if s, _ := MostVariedWindow(burst, 20); s > 50 || s+20 < 53 {
		t.Errorf("burst: window %d..%d misses minutes 50..52", s, s+19)
	}
	// Constant, then a higher constant: no variation anywhere but across
	// the step; a window inside one level ties at 0 and the busier wins.
	step := mk(100, func(i int) float64 {
		if i < 50 {
			return 10
		}
		return 20
	})
	if s, sd := MostVariedWindow(step, 10); s != 45 || sd != 5 {
		t.Errorf("step: start %d sd %.1f, want the window with 5 minutes of each level (45, sd 5)", s, sd)
	}
	if s, sd := MostVariedWindow(mk(30, func(int) float64 { return 7 }), 10); s != 0 || sd != 0 {
		t.Errorf("constant: start %d sd %.1f, want 0, 0", s, sd)
	}
	if s, _ := MostVariedWindow(mk(30, func(int) float64 { return 7 }), 100); s != 0 {
		t.Errorf("window longer than the trace: start %d", s)
	}
	if s, sd := MostVariedWindow(nil, 10); s != 0 || sd != 0 {
		t.Errorf("empty: %d %v", s, sd)
	}
}

// Table 5's two share one window: where their summed load varies most.
func TestPairWindow(t *testing.T) {
	a := AzureFunction{Row: 1, Counts: make([]float64, 300)}
	b := AzureFunction{Row: 2, Counts: make([]float64, 300)}
	for i := range a.Counts {
		a.Counts[i], b.Counts[i] = 100, 50
		if i >= 200 && i < 260 {
			a.Counts[i] = float64(100 + 200*(i%2)) // a varies late
		}
		if i >= 20 && i < 40 {
			b.Counts[i] = float64(50 + 100*(i%2)) // b a little, early
		}
	}
	if s, _ := PairWindow(a, b, 60); s != 200 {
		t.Fatalf("pair window from minute %d, want 200", s)
	}
}

// Fig. 3's ideal: the arrival rate over what a replica really serves,
// rounded up; a slower replica needs more.
func TestIdealPodsFromServingRate(t *testing.T) {
	rates := []float64{0, 10, 140, 141, 100}
	for _, c := range []struct {
		per  float64
		want []int
	}{
		{20, []int{0, 1, 7, 8, 5}},        // 2 × 1/100 ms
		{2 / 0.108, []int{0, 1, 8, 8, 6}}, // the same replica at ET 108 ms
	} {
		got := IdealPods(rates, c.per)
		for i := range got {
			if got[i] != c.want[i] {
				t.Fatalf("%.2f req/s per replica: %v, want %v", c.per, got, c.want)
			}
		}
	}
	ss := []*series{{ExecMs: []float64{0, 100, 110}}, {ExecMs: []float64{105}}, nil}
	if m := meanExecMs(ss); math.Abs(m-105) > 1e-9 {
		t.Fatalf("mean ET %.2f ms, want 105 (zeros are no report)", m)
	}
}
