package allocator

import "testing"

// One host reporting nine made-up members beside another host's one real
// member: with HostMaxShare 0.5 the nine hold at most half of Ω (plus
// their CPU floors) and half the memory, however many OOM requests they
// send; the real member keeps the rest and can still be granted memory.
func TestHostMaxShareBoundsALyingHost(t *testing.T) {
	p := DefaultParams()
	p.HostMaxShare = 0.5
	a, err := NewBooks("a", Budget{CPUCores: 2, MemoryBytes: gib}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	real := Key(1<<32 | 1)
	join(t, a, real, 4)
	for h := range Key(9) {
		join(t, a, 2<<32|(h+1), 4)
	}
	var fakeQ, fakeM int64
	sum := func() {
		fakeQ, fakeM = 0, 0
		for _, m := range a.Members() {
			if m.Key.Host() == 2 {
				fakeQ += m.QuotaUs
				fakeM += m.MemLimit
			}
		}
	}
	sum()
	floors := 9 * a.floorUs(a.Len())
	if fakeQ > 100000+floors {
		t.Fatalf("the lying host holds %d µs of Ω 200000; want at most half plus %d of floors", fakeQ, floors)
	}
	if q := a.Member(real).QuotaUs; q < 100000-floors {
		t.Fatalf("the real member was cut to %d µs", q)
	}
	// Telemetry asking for more (throttled every period) stays within the cap.
	for seq := uint64(1); seq <= 30; seq++ {
		for h := range Key(9) {
			k := 2<<32 | (h + 1)
			a.CPU(k, Stat{Seq: seq, QuotaUs: a.Member(k).QuotaUs, PeriodUs: 100000, Throttled: true, UsageUs: a.Member(k).QuotaUs})
		}
	}
	sum()
	if fakeQ > 100000+floors {
		t.Fatalf("after 30 throttled periods the lying host holds %d µs", fakeQ)
	}
	// The real member gives memory back; the phantoms' OOM requests take
	// at most half of the budget, the rest stays for the real member.
	if !a.Reclaimed(real, 100<<20, 50<<20) {
		t.Fatal("reclaim not counted")
	}
	denied := 0
	for range 50 {
		for h := range Key(9) {
			if o := a.OOM(2<<32|(h+1), 0, 0, 64<<20, false); o.Action == OOMDeny {
				denied++
			}
		}
	}
	sum()
	if fakeM > gib/2 || denied == 0 {
		t.Fatalf("the lying host holds %d MiB of 1024 (%d requests denied); want at most 512", fakeM>>20, denied)
	}
	if o := a.OOM(real, 100<<20, 100<<20, 64<<20, false); o.Action != OOMGrant {
		t.Fatalf("the real member's OOM request: %+v; want a grant", o)
	}
}

// Without a cap (0 or 1), one host may hold the whole app.
func TestHostMaxShareOffByDefault(t *testing.T) {
	a := newApp(t, 2, gib, 0)
	join(t, a, 1<<32|1, 4)
	join(t, a, 1<<32|2, 4)
	if q := a.Member(1<<32|1).QuotaUs + a.Member(1<<32|2).QuotaUs; q != 200000 {
		t.Fatalf("one host's members hold %d µs; want all of Ω", q)
	}
}
