package allocator

import "testing"

// releaseScene: members 1 and 2 of one app (Ω = 0.6 core). Member 1 runs
// a burst for a window while 2 is quiet, then 1's phase ends (quiet
// periods with the given usage, throttled or not) and 2 starts its burst:
// four throttle events in one period (the fair-share rule first takes 1
// down to Ω/λ for it; the later ones ask for more). It returns the books
// and every event's decisions.
func releaseScene(t *testing.T, p Params, quiet []int64, quietThrottled bool) (*Books, []Decision) {
	t.Helper()
	a, err := NewBooks("r", Budget{CPUCores: 0.6, MemoryBytes: 1 << 30}, p, Escra{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{1, 2} {
		if _, err := a.Join(Join{Key: k, HostMaxUs: 200000}); err != nil {
			t.Fatal(err)
		}
	}
	seq := uint64(0)
	feed := func(k Key, used int64, th bool) {
		q := a.Member(k).QuotaUs
		used = min(used, q)
		if _, err := a.CPU(k, Stat{Seq: seq, QuotaUs: q, PeriodUs: 100000, UnusedUs: q - used, Throttled: th, UsageUs: used}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 { // 1 bursts: it uses all it has and is throttled
		seq++
		feed(1, 1<<40, true)
		feed(2, 1000, false)
	}
	for _, u := range quiet {
		seq++
		feed(1, u, quietThrottled)
		feed(2, 1000, false)
	}
	seq++
	var all []Decision
	for range 4 {
		ds, err := a.Throttle(2, seq)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ds...)
	}
	return a, all
}

// After 1's phase ends, 2's throttle event takes 1's quota down to its
// recent use and gives it to 2; without the release lever 1's headroom
// floor holds its equal share and 2 cannot pass it.
func TestReleaseServesSiblingWhosePhaseStarts(t *testing.T) {
	on, off := DefaultParams(), DefaultParams()
	off.ReleasePeriods = 0
	a, ds := releaseScene(t, on, []int64{1500, 1200, 1000}, false)
	b, _ := releaseScene(t, off, []int64{1500, 1200, 1000}, false)
	if q := b.Member(1).QuotaUs; q < 30000 {
		t.Fatalf("scene broken: without release member 1 holds %d µs, want its equal share 30000", q)
	}
	var released bool
	for _, d := range ds {
		released = released || (d.Key == 1 && d.Reason == ReasonRelease)
	}
	if !released {
		t.Errorf("no release decision for member 1 in %+v", ds)
	}
	// (1 + headroom) × its recent peak of 1500 µs, or the floor.
	if q := a.Member(1).QuotaUs; q > 1650 && q > on.CPUFloorUs {
		t.Errorf("member 1 keeps %d µs after its phase ended, want ≤ 1650", q)
	}
	if q2, q2off := a.Member(2).QuotaUs, b.Member(2).QuotaUs; q2 < 55000 || q2off > 30000 {
		t.Errorf("member 2's quota: %d µs with release (want ≥ 55000), %d without (want ≤ 30000)", q2, q2off)
	}
	if a.CPUAllocatedUs() > a.OmegaUs() {
		t.Errorf("Σ quotas %d > Ω %d", a.CPUAllocatedUs(), a.OmegaUs())
	}
}

// A sibling that was throttled in its last periods, or whose demand still
// swings near its peak, gives nothing.
func TestReleaseSparesBusySiblings(t *testing.T) {
	noHeadroom := DefaultParams()
	noHeadroom.Headroom = 0 // so a cut to the recent peak is below Ω/λ
	for name, sc := range map[string]struct {
		p     Params
		quiet []int64
		th    bool
	}{
		"throttled recently": {DefaultParams(), []int64{1000, 1000, 1000}, true},
		// 29500 µs is more than half its burst's peak: not over.
		"phase not over": {noHeadroom, []int64{1000, 1000, 29500}, false},
		"too few quiet":  {DefaultParams(), []int64{1000}, false},
	} {
		a, ds := releaseScene(t, sc.p, sc.quiet, sc.th)
		for _, d := range ds {
			if d.Reason == ReasonRelease {
				t.Errorf("%s: released %+v", name, d)
			}
		}
		if a.CPUAllocatedUs() > a.OmegaUs() {
			t.Errorf("%s: Σ quotas %d > Ω %d", name, a.CPUAllocatedUs(), a.OmegaUs())
		}
	}
}
