package allocator

import (
	"testing"
	"time"
)

func TestPolicyByName(t *testing.T) {
	for name, want := range map[string]string{"": "escra", "escra": "escra", "escra-paper": "escra-paper"} {
		p, err := PolicyByName(name)
		if err != nil || p.Name() != want {
			t.Fatalf("PolicyByName(%q) = %v, %v; want %s", name, p, err, want)
		}
	}
	if _, err := PolicyByName("pema2"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

// The paper's policy ignores the headroom floor and throttle events; the
// escra policy keeps the quota over its recent peak and raises at once.
func TestPaperAndEscraPolicies(t *testing.T) {
	in := CPUInput{P: DefaultParams(), QuotaUs: 50000, UnusedUs: 40000, AvgUnusedUs: 40000,
		PeakUsedUs: 30000, UnallocatedUs: 50000, Members: 1}
	q, _ := EscraPaper{}.NextQuota(in)
	if want := int64(50000 - 0.8*40000); q != want {
		t.Fatalf("paper scale-down %d, want %d", q, want)
	}
	q, _ = Escra{}.NextQuota(in)
	if want := int64(33000); q != want { // 1.1 × the window's peak of 30000
		t.Fatalf("escra scale-down %d, want %d", q, want)
	}
	in.DecayedPeakUs = 40000
	if q, _ = (Escra{}).NextQuota(in); q != 44000 {
		t.Fatalf("escra scale-down with a decaying peak of 40000: %d, want 44000", q)
	}
	if q, r := (EscraPaper{}).OnThrottle(in); q != in.QuotaUs || r != "" {
		t.Fatalf("paper reacted inside a period: %d %q", q, r)
	}
	if q, r := (Escra{}).OnThrottle(in); q != 50000+50000 || r != ReasonThrottleEvent {
		t.Fatalf("escra throttle event: %d %q, want the quota plus U/λ", q, r)
	}
	in.Members = 4
	if q, _ := (Escra{}).OnThrottle(in); q != 100000 {
		t.Fatalf("escra throttle event with 4 members: %d, want the quota doubled (more than U/λ)", q)
	}
	in.Throttled, in.RaisedInPeriod, in.AvgThrottle = true, true, 0.5
	if q, _ := (Escra{}).NextQuota(in); q != in.QuotaUs {
		t.Fatalf("escra scaled up again for a period a throttle event answered: %d", q)
	}
	if q, _ := (EscraPaper{}).NextQuota(in); q <= in.QuotaUs {
		t.Fatalf("escra-paper did not scale up a throttled period: %d", q)
	}
}

// A throttle event raises at once, never beyond the pool, and an event
// for a period whose statistic already arrived is stale.
func TestThrottleEvent(t *testing.T) {
	a, err := NewBooks("a", Budget{CPUCores: 1, MemoryBytes: gib}, DefaultParams(), Escra{})
	if err != nil {
		t.Fatal(err)
	}
	join(t, a, 1, 2)
	join(t, a, 2, 2) // two members, 50000 each
	// Member 1 idles down to its floor.
	for seq := range uint64(30) {
		q := a.Member(1).QuotaUs
		if _, err := a.CPU(1, Stat{Seq: seq, QuotaUs: q, PeriodUs: 100000, UnusedUs: q - 1000, UsageUs: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	q0 := a.Member(1).QuotaUs
	if q0 > 10000 {
		t.Fatalf("idle member kept %d µs", q0)
	}
	ds, err := a.Throttle(1, 30)
	if err != nil || len(ds) != 1 || ds[0].QuotaUs <= q0 || ds[0].Reason != ReasonThrottleEvent {
		t.Fatalf("throttle event: %+v, %v (quota was %d)", ds, err, q0)
	}
	if got := a.CPUAllocatedUs(); got > a.OmegaUs() {
		t.Fatalf("Σ quotas %d > Ω %d", got, a.OmegaUs())
	}
	u0 := 100000 - 50000 - q0
	if want := q0 + max(q0, u0/2); a.Member(1).QuotaUs != want {
		t.Fatalf("raise to %d, want %d (one fair share of the pool %d)", a.Member(1).QuotaUs, want, u0)
	}
	// Throttled again in the same period: doubling is capped by the pool.
	if _, err := a.Throttle(1, 30); err != nil || a.Member(1).QuotaUs != 100000-a.Member(2).QuotaUs {
		t.Fatalf("second event: quota %d, want the rest of the pool (other member %d), %v", a.Member(1).QuotaUs, a.Member(2).QuotaUs, err)
	}
	if _, err := a.Throttle(1, 29); err != ErrStale {
		t.Fatalf("event for a reported period: %v, want ErrStale", err)
	}
	if ds, err := a.Throttle(1, 30); err != nil || len(ds) != 0 {
		t.Fatalf("event with an empty pool at the equal share: %+v, %v; want no decision", ds, err)
	}
	paper, _ := NewBooks("p", Budget{CPUCores: 1, MemoryBytes: gib}, DefaultParams(), EscraPaper{})
	join(t, paper, 1, 2)
	if ds, err := paper.Throttle(1, 0); err != nil || len(ds) != 0 {
		t.Fatalf("escra-paper reacted to a throttle event: %+v %v", ds, err)
	}
}

func TestDecayingPeak(t *testing.T) {
	p := DefaultParams()
	p.PeakHalfLife = time.Second // 10 periods
	a, err := NewBooks("a", Budget{CPUCores: 2, MemoryBytes: gib}, p, Escra{})
	if err != nil {
		t.Fatal(err)
	}
	join(t, a, 1, 2)
	feed := func(seq uint64, used int64) {
		q := a.Member(1).QuotaUs
		u := min(used, q)
		if _, err := a.CPU(1, Stat{Seq: seq, QuotaUs: q, PeriodUs: 100000, UnusedUs: q - u, UsageUs: u}); err != nil {
			t.Fatal(err)
		}
	}
	feed(0, 80000)
	for seq := uint64(1); seq <= 20; seq++ {
		feed(seq, 5000)
	}
	// After 20 periods (two half-lives) the peak is 20000: the quota stays
	// at or above 1.1 × 20000 although the window's peak is 5000.
	if q := a.Member(1).QuotaUs; q < 22000 || q > 40000 {
		t.Fatalf("quota %d after two half-lives, want ≈ 1.1 × 20000", q)
	}
}

// The pema policy returns the loop's target and sums what it saw; the
// Books still clamp a target to Ω.
func TestTargetsPolicy(t *testing.T) {
	p, err := PolicyByName("pema")
	if err != nil || p.Name() != "pema" {
		t.Fatal(p, err)
	}
	tg := p.(*Targets)
	a, _ := NewBooks("x", Budget{CPUCores: 1, MemoryBytes: 64 * MiB}, DefaultParams(), tg)
	a.Join(Join{Key: 1, HostMaxUs: 200000})
	a.Join(Join{Key: 2, HostMaxUs: 200000})
	// No target: no change, whatever the usage.
	d, _ := a.CPU(1, Stat{Seq: 1, QuotaUs: 50000, PeriodUs: 100000, UnusedUs: 40000, UsageUs: 10000})
	if d.Gen != 0 {
		t.Fatalf("changed without a target: %+v", d)
	}
	tg.Set(map[Key]int64{1: 20000, 2: 90000})
	d, _ = a.CPU(1, Stat{Seq: 2, QuotaUs: 50000, PeriodUs: 100000, UnusedUs: 0, Throttled: true, UsageUs: 50000})
	if d.QuotaUs != 20000 || d.Reason != ReasonSLO {
		t.Fatalf("target not applied: %+v", d)
	}
	// 90000 asked, 50000 + the 30000 freed is all Ω = 100000 allows.
	d, _ = a.CPU(2, Stat{Seq: 1, QuotaUs: 50000, PeriodUs: 100000, UnusedUs: 50000})
	if d.QuotaUs != 80000 || a.CPUAllocatedUs() > a.OmegaUs() {
		t.Fatalf("over Ω: %+v alloc %d", d, a.CPUAllocatedUs())
	}
	u := tg.Take()
	if u[1].Periods != 2 || u[1].Throttled != 1 || u[1].UsedUs != 10000+50000 || u[1].QuotaUs != 100000 {
		t.Fatalf("usage %+v", u[1])
	}
	if len(tg.Take()) != 0 {
		t.Fatal("Take did not reset")
	}
}

// PEMA is CPU only (PEMA §6): under the pema policy an OOM request is
// still granted from the app's memory pool, as under Escra.
func TestTargetsKeepsOOMRescue(t *testing.T) {
	a, _ := NewBooks("x", Budget{CPUCores: 1, MemoryBytes: 512 * MiB, Sigma: 0.5}, DefaultParams(), NewTargets())
	a.Join(Join{Key: 1, HostMaxUs: 100000})
	lim := a.Member(1).MemLimit
	o := a.OOM(1, lim, lim, 0, false)
	if o.Action != OOMGrant || o.Decision.MemLimit != lim+64*MiB {
		t.Fatalf("limit %d: %+v", lim, o)
	}
}
