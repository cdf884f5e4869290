package allocator

import "testing"

// The per-container caps hold on every path that raises a limit:
// bootstrap, scale-up under throttling, a throttle event, OOM grants and
// pending memory, in plain and in acknowledged accounting.
func TestMaximaNeverPassed(t *testing.T) {
	for _, gated := range []bool{false, true} {
		a := newApp(t, 4, gib, 0)
		a.AckGated = gated
		const maxQ, maxM = 30000, 200 << 20
		ds, err := a.Join(Join{Key: 1, HostMaxUs: 400000, MaxQuotaUs: maxQ, MaxMem: maxM, MemUsage: 10 << 20})
		if err != nil || len(ds) != 1 {
			t.Fatalf("join: %+v %v", ds, err)
		}
		if ds[0].QuotaUs != maxQ || ds[0].MemLimit != maxM {
			t.Fatalf("gated %v: bootstrap %+v, want the caps %d µs %d B (fair share 400000 µs)", gated, ds[0], maxQ, maxM)
		}
		if gated {
			a.Ack(1, ds[0].Gen, AckApplied)
		}
		join(t, a, 2, 4) // an uncapped sibling takes the rest
		for seq := uint64(0); seq < 40; seq++ {
			d, err := a.CPU(1, Stat{Seq: seq, QuotaUs: maxQ, PeriodUs: 100000, Throttled: true, UsageUs: maxQ})
			if err != nil {
				t.Fatal(err)
			}
			if gated && d.Gen != 0 {
				a.Ack(1, d.Gen, AckApplied)
			}
			if q := a.Member(1).QuotaUs; q > maxQ {
				t.Fatalf("gated %v: period %d raised the quota to %d over max %d", gated, seq, q, maxQ)
			}
		}
		ev, _ := a.Throttle(1, 100)
		for _, d := range ev {
			if d.Key == 1 && d.QuotaUs > maxQ {
				t.Fatalf("throttle event raised to %d", d.QuotaUs)
			}
		}
		// OOM: a grant stops at max_memory; a request past it is denied.
		o := a.OOM(1, maxM, maxM, 4096, true)
		if o.Action != OOMDeny || o.Reason != "at the container's max_memory" {
			t.Fatalf("gated %v: OOM at the cap: %+v", gated, o)
		}
		if m := a.Member(1).MemLimit; m != maxM {
			t.Fatalf("limit %d after a denied request", m)
		}
	}
}

func TestMaxMemoryCapsAGrant(t *testing.T) {
	a := newApp(t, 1, gib, 0.5) // half the memory withheld for grants
	a.Join(Join{Key: 1, HostMaxUs: 100000, MaxMem: 600 << 20})
	if m := a.Member(1).MemLimit; m != 512<<20 {
		t.Fatalf("bootstrap %d", m)
	}
	o := a.OOM(1, 512<<20, 512<<20, 4096, true)
	if o.Action != OOMGrant || o.Decision.MemLimit > 600<<20 {
		t.Fatalf("grant %+v: want at most the cap", o)
	}
	for i := 0; i < 5; i++ {
		a.OOM(1, a.Member(1).MemLimit, a.Member(1).MemLimit, 4096, true)
	}
	if m := a.Member(1).MemLimit; m != 600<<20 {
		t.Fatalf("after grants: %d, want exactly the cap", m)
	}
}

// Recommend mode: statistics measured under an unlimited quota are
// restated against the recommendation, so a container using more than it
// is recommended raises the recommendation (Υ) and an idle one lowers it
// (κ), as the same container would be treated under enforcement.
func TestShadowStatMovesRecommendation(t *testing.T) {
	a := newApp(t, 2, gib, 0)
	a.Join(Join{Key: 1, HostMaxUs: 200000, CurQuotaUs: 200000})
	a.Join(Join{Key: 2, HostMaxUs: 200000, CurQuotaUs: 200000})
	q0 := a.Member(1).QuotaUs // 100000: Ω/λ
	for seq := uint64(0); seq < 20; seq++ {
		// Busy: 1.5 cores under its own unlimited quota, never throttled.
		busy := a.ShadowStat(1, Stat{Seq: seq, QuotaUs: -1, PeriodUs: 100000, UsageUs: 150000})
		if under := a.Member(1).QuotaUs <= 150000; busy.Throttled != under || under && busy.UnusedUs != 0 {
			t.Fatalf("busy restated %+v: want throttled under a %d µs recommendation", busy, a.Member(1).QuotaUs)
		}
		if _, err := a.CPU(1, busy); err != nil {
			t.Fatal(err)
		}
		idle := a.ShadowStat(2, Stat{Seq: seq, QuotaUs: -1, PeriodUs: 100000, UsageUs: 1000})
		if idle.Throttled || idle.UnusedUs != a.Member(2).QuotaUs-1000 {
			t.Fatalf("idle restated %+v", idle)
		}
		if _, err := a.CPU(2, idle); err != nil {
			t.Fatal(err)
		}
	}
	if q1, q2 := a.Member(1).QuotaUs, a.Member(2).QuotaUs; q1 <= q0 || q2 >= q0 {
		t.Fatalf("recommendations busy %d idle %d, from %d each", q1, q2, q0)
	}
	// The cgroups were never touched: what they hold is still the
	// registration's.
	if q, _ := a.Member(1).Applied(); q != 200000 {
		t.Fatalf("applied %d", q)
	}
}

// The switch to enforce sends the recommendations and counts what the
// cgroups hold until the daemons acknowledge them.
func TestEnforceSendsRecommendations(t *testing.T) {
	a := newApp(t, 1, gib, 0)
	a.Join(Join{Key: 1, HostMaxUs: 400000, CurQuotaUs: 400000, CurMem: 900 << 20})
	a.Join(Join{Key: 2, HostMaxUs: 400000, CurQuotaUs: 400000})
	ds := a.Enforce()
	// Eq. (2) as the members came: the first got all the memory, the
	// second waits for a reclaim.
	if len(ds) != 2 || ds[0].QuotaUs != 50000 || ds[0].MemLimit != gib || ds[1].QuotaUs != 50000 || ds[0].Reason != ReasonEnforce {
		t.Fatalf("enforce: %+v", ds)
	}
	// Until acknowledged, member 1's 4 cores and 900 MiB are counted:
	// nothing is free to hand out.
	if a.CPUUnallocatedUs() != 0 || a.MemUnallocated() != 0 {
		t.Fatalf("unallocated %d µs %d B before the acknowledgements", a.CPUUnallocatedUs(), a.MemUnallocated())
	}
	for _, d := range ds {
		a.Ack(d.Key, d.Gen, AckApplied)
	}
	if a.CPUUnallocatedUs() != 0 || a.MemUnallocated() != 0 || a.CPUAllocatedUs() != 100000 {
		t.Fatalf("after acks: unallocated %d µs %d B", a.CPUUnallocatedUs(), a.MemUnallocated())
	}
	if q, m := a.Member(1).Applied(); q != 50000 || m != gib {
		t.Fatalf("applied %d %d", q, m)
	}
	// And back: nothing is pending, the applied limits stay.
	a.Recommend()
	if e1, e2 := a.Extra(); e1 != 0 || e2 != 0 || a.AckGated {
		t.Fatalf("recommend: extra %d %d", e1, e2)
	}
}

// A usage sample above the recommended memory limit stands for the OOM
// request that limit would have raised: the recommendation grows from the
// pool, then from the siblings' recommendations above usage + δ.
func TestShadowUsage(t *testing.T) {
	a := newApp(t, 1, 256<<20, 0)
	a.Join(Join{Key: 1, HostMaxUs: 100000})
	a.Join(Join{Key: 2, HostMaxUs: 100000})
	// The first took all the memory; a reclaim on the books and the
	// pending fill share it: 1 at usage + δ = 70 MiB, 2 at 128 MiB.
	a.Usage(1, 20<<20)
	if a.ShadowReclaim(2) != 1 {
		t.Fatal("nothing reclaimed")
	}
	a.FillPending()
	if m1, m2 := a.Member(1).MemLimit, a.Member(2).MemLimit; m1 != 70<<20 || m2 != 128<<20 {
		t.Fatalf("limits %d %d", m1, m2)
	}
	a.Usage(1, 5<<20)
	// 200 MiB is 72 MiB over 2's recommendation; the pool holds 58:
	// 1's recommendation gives up 15 MiB (down to 5 MiB + δ).
	d, ok := a.ShadowUsage(2, 200<<20)
	if !ok || d.MemLimit <= 200<<20 || d.MemLimit > 201<<20 {
		t.Fatalf("shadow OOM: %+v %v", d, ok)
	}
	if m1 := a.Member(1).MemLimit; m1 != 55<<20 {
		t.Fatalf("sibling's recommendation %d, want usage + δ", m1)
	}
	if m := a.Member(2); m.OOMGrants != 0 || m.OOMDenies != 0 {
		t.Fatalf("counters moved: %d %d", m.OOMGrants, m.OOMDenies)
	}
	if _, ok := a.ShadowUsage(2, 10<<20); ok {
		t.Fatal("usage below the recommendation decided something")
	}
	if a.MemAllocated() > 256<<20 {
		t.Fatalf("Σ recommendations %d over the budget", a.MemAllocated())
	}
}

// Switching to enforce while raises are held (a controller that just
// started) sends only cuts; a recommended raise waits for the hold's end.
func TestEnforceUnderHoldRaisesOnlyCuts(t *testing.T) {
	a := newApp(t, 1, gib, 0)
	a.Join(Join{Key: 1, HostMaxUs: 400000, CurQuotaUs: 20000})
	a.Join(Join{Key: 2, HostMaxUs: 400000, CurQuotaUs: 300000})
	a.HoldRaises = true
	for _, d := range a.Enforce() {
		if q, _ := a.Member(d.Key).Applied(); d.QuotaUs > q {
			t.Fatalf("raise %+v sent under HoldRaises (cgroup holds %d)", d, q)
		}
	}
	if q := a.Member(1).QuotaUs; q != 20000 {
		t.Fatalf("target %d, want what the cgroup holds", q)
	}
	if a.CPUAllocatedUs() > a.OmegaUs() {
		t.Fatalf("Σ %d over Ω", a.CPUAllocatedUs())
	}
}
