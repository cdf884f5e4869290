package allocator

import "testing"

// fairShareApp: Ω = 1 core, two members; member 1 idles down to a few ms,
// then member 2's throttle events take the whole pool, as a sibling does
// that burst first and keeps its peak's quota for a window.
func fairShareApp(t *testing.T, fairShare, ackGated bool) (a *Books, q1 int64) {
	t.Helper()
	p := DefaultParams()
	p.FairShareOnThrottle = fairShare
	a, err := NewBooks("f", Budget{CPUCores: 1, MemoryBytes: gib}, p, Escra{})
	if err != nil {
		t.Fatal(err)
	}
	a.AckGated = ackGated
	// The daemons apply every decision of the set-up at once.
	applied := func(ds ...Decision) {
		for _, d := range ds {
			a.Ack(d.Key, d.Gen, AckApplied)
		}
	}
	applied(join(t, a, 1, 2)...)
	applied(join(t, a, 2, 2)...)
	for seq := range uint64(30) {
		q := a.Member(1).QuotaUs
		d, err := a.CPU(1, Stat{Seq: seq, QuotaUs: q, PeriodUs: 100000, UnusedUs: q - 1000, UsageUs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		applied(d)
		applied(a.Redistribute()...)
	}
	for range 3 {
		ds, err := a.Throttle(2, 30)
		if err != nil {
			t.Fatal(err)
		}
		applied(ds...)
	}
	q1 = a.Member(1).QuotaUs
	if q1 > 10000 || a.Member(2).QuotaUs != 100000-q1 || a.CPUUnallocatedUs() != 0 {
		t.Fatalf("set-up: quotas %d and %d, pool %d: want member 2 holding all but member 1's few ms",
			q1, a.Member(2).QuotaUs, a.CPUUnallocatedUs())
	}
	return a, q1
}

// A throttled member below its equal share, with the pool empty: the
// member above Ω/λ is cut to Ω/λ first, then the throttled one is raised
// to it (Σ ≤ Ω after each decision, in the order they are sent). The one
// above its share gets nothing from the one below, and with the option
// off the event changes nothing (the old behaviour).
func TestThrottleTakesEqualShareFromMembersAbove(t *testing.T) {
	a, q1 := fairShareApp(t, true, false)
	ds, err := a.Throttle(1, 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Key != 2 || ds[0].QuotaUs != 50000 || ds[1].Key != 1 || ds[1].QuotaUs != 50000 {
		t.Fatalf("decisions %+v (member 1 was at %d µs): want member 2 cut to 50000, then member 1 raised to 50000", ds, q1)
	}
	if got := a.CPUAllocatedUs(); got > a.OmegaUs() {
		t.Fatalf("Σ quotas %d > Ω %d", got, a.OmegaUs())
	}
	// Both at Ω/λ now: a further event of either takes nothing.
	for _, k := range []Key{1, 2} {
		if ds, err := a.Throttle(k, 30); err != nil || len(ds) != 0 {
			t.Fatalf("member %d at its share, pool empty: %+v %v, want nothing", k, ds, err)
		}
	}

	off, _ := fairShareApp(t, false, false)
	if ds, err := off.Throttle(1, 30); err != nil || len(ds) != 0 {
		t.Fatalf("option off: %+v %v, want no decision with an empty pool", ds, err)
	}
	paper, err := NewBooks("p", Budget{CPUCores: 1, MemoryBytes: gib}, DefaultParams(), EscraPaper{})
	if err != nil {
		t.Fatal(err)
	}
	join(t, paper, 1, 2)
	join(t, paper, 2, 2)
	if ds, err := paper.Throttle(1, 0); err != nil || len(ds) != 0 {
		t.Fatalf("escra-paper: %+v %v, want the paper's once-per-period rule", ds, err)
	}
}

// With acknowledged accounting the cut frees nothing until member 2's
// daemon applied it: the event sends only the cut, and member 1 is
// raised by Redistribute once the acknowledgement arrives, never before
// (Σ counted ≤ Ω throughout).
func TestThrottleEqualShareWaitsForTheCutsAcknowledgement(t *testing.T) {
	a, q1 := fairShareApp(t, true, true)
	ds, err := a.Throttle(1, 30)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Key != 2 || ds[0].QuotaUs != 50000 {
		t.Fatalf("decisions %+v: want only member 2's cut to 50000 before its acknowledgement", ds)
	}
	if a.Member(1).QuotaUs != q1 || a.CountedCPUUs() > a.OmegaUs() {
		t.Fatalf("member 1 at %d (was %d), counted %d of Ω %d", a.Member(1).QuotaUs, q1, a.CountedCPUUs(), a.OmegaUs())
	}
	if rd := a.Redistribute(); len(rd) != 0 {
		t.Fatalf("redistributed %+v before the cut was acknowledged", rd)
	}
	if !a.Ack(2, ds[0].Gen, AckApplied) {
		t.Fatal("the cut's acknowledgement freed nothing")
	}
	rd := a.Redistribute()
	if len(rd) != 1 || rd[0].Key != 1 || rd[0].QuotaUs != 50000 {
		t.Fatalf("after the acknowledgement: %+v, want member 1 raised to 50000", rd)
	}
	if a.CountedCPUUs() > a.OmegaUs() {
		t.Fatalf("counted %d > Ω %d", a.CountedCPUUs(), a.OmegaUs())
	}
}

// A throttled member far below Ω/λ whose own doubling the pool could
// cover still reaches Ω/λ in one event: when a sibling that bursts
// apart holds most of the budget, doubling from a few ms would take
// several periods to reach what an equal static split gives at once.
func TestThrottleReachesEqualShareWhenThePoolCoversTheDoubling(t *testing.T) {
	a, q1 := fairShareApp(t, true, false)
	// Member 2 gives back part of the budget: the pool then covers member
	// 1's doubling but not its equal share.
	if d := a.decide(a.Member(2), 100000-4*q1, 0, ReasonUnused); d.Gen == 0 {
		t.Fatal("set-up: cutting member 2 sent nothing")
	}
	pool := a.CPUUnallocatedUs()
	if pool < q1 || q1+pool >= 50000 {
		t.Fatalf("set-up: pool %d, member 1 at %d: want the doubling covered, the equal share not", pool, q1)
	}
	ds, err := a.Throttle(1, 30)
	if err != nil {
		t.Fatal(err)
	}
	if a.Member(1).QuotaUs != 50000 || a.Member(2).QuotaUs != 50000 {
		t.Fatalf("after the event: quotas %d and %d (%+v): want both at Ω/λ = 50000", a.Member(1).QuotaUs, a.Member(2).QuotaUs, ds)
	}
	if got := a.CPUAllocatedUs(); got > a.OmegaUs() {
		t.Fatalf("Σ quotas %d > Ω %d", got, a.OmegaUs())
	}
}
