package allocator

import "testing"

// ackAll acknowledges decisions as applied.
func ackAll(a *Books, ds []Decision) {
	for _, d := range ds {
		a.Ack(d.Key, d.Gen, AckApplied)
	}
}

// The partition step of the fault bench in the books: two containers
// found with 0.4 core and 64 MiB (Docker's), the controller's last limits
// for h1 below them (0.3 core, 51 MiB after reclaim) and h2 given the rest
// of Ω. When h1 goes silent its escrad may raise an OOM to 64 MiB and put
// 0.4 core back: the hold covers both, h2 is cut to make room, and the
// books balance once the cut is acknowledged. h1 rejoining with its own
// limits back re-enters with exactly what was held.
func TestSilentHostHeldAtItsOwnLimits(t *testing.T) {
	a := gatedApp(t, 1, 320*MiB)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	for _, k := range []Key{k1, k2} {
		ds, err := a.Join(Join{Key: k, HostMaxUs: 200000, CurQuotaUs: 40000, CurMem: 64 * MiB, OwnQuotaUs: 40000, OwnMem: 64 * MiB})
		if err != nil {
			t.Fatal(err)
		}
		ackAll(a, ds)
	}
	m1, m2 := a.Member(k1), a.Member(k2)
	ackAll(a, []Decision{a.decide(m1, 30000, 51*MiB, ReasonUnused)})
	ackAll(a, []Decision{a.decide(m2, 70000, 130*MiB, ReasonThrottled)})
	if c := a.CountedCPUUs(); c != 100000 {
		t.Fatalf("counted %d µs before the partition, want all of Ω", c)
	}

	ds, err := a.LeaveHeld(k1, "h1/c1")
	if err != nil {
		t.Fatal(err)
	}
	if cpu, mem := a.Held(); cpu != 40000 || mem != 64*MiB {
		t.Fatalf("held %d µs and %d MiB; want h1's own 40000 µs and 64 MiB (above its last 30000 µs, 51 MiB)", cpu, mem>>20)
	}
	var cut int64
	for _, d := range ds {
		if d.Key == k2 {
			cut = d.QuotaUs
		}
	}
	if cut == 0 || cut > 60000 {
		t.Fatalf("decisions %+v: want h2 cut to at most 60000 µs to make room for h1's own quota", ds)
	}
	if a.CountedCPUUs() <= a.OmegaUs() {
		t.Fatalf("counted %d µs before h2 acknowledged its cut: its old quota is still in its cgroup", a.CountedCPUUs())
	}
	if o := a.OOM(k2, 130*MiB, 130*MiB, 200*MiB, false); o.Action == OOMGrant && o.Decision.MemLimit > 320*MiB-64*MiB {
		t.Fatalf("h2 granted %d MiB while h1 may hold 64 MiB", o.Decision.MemLimit>>20)
	}
	ackAll(a, ds)
	if a.CountedCPUUs() > a.OmegaUs() || a.CountedMem() > 320*MiB {
		t.Fatalf("after the cut: counted %d µs (Ω %d), %d MiB", a.CountedCPUUs(), a.OmegaUs(), a.CountedMem()>>20)
	}
	// Worst case in the cgroups: h1 at its own limits, h2 at what it was given.
	if cpu, mem := 40000+m2.QuotaUs, 64*MiB+m2.MemLimit; cpu > a.OmegaUs() || mem > 320*MiB {
		t.Fatalf("h1 at its own limits and h2 at its own: %d µs, %d MiB over the budget", cpu, mem>>20)
	}

	before, beforeMem := a.CountedCPUUs(), a.CountedMem()
	a.Unhold("h1/c1")
	k1b := Key(3<<32 | 1)
	ds, err = a.Join(Join{Key: k1b, HostMaxUs: 200000, CurQuotaUs: 40000, CurMem: 64 * MiB, OwnQuotaUs: 40000, OwnMem: 64 * MiB})
	if err != nil {
		t.Fatal(err)
	}
	if a.CountedCPUUs() > a.OmegaUs() || a.CountedMem() > 320*MiB || a.CountedCPUUs() != before || a.CountedMem() != beforeMem {
		t.Fatalf("rejoin with the own limits back: counted %d µs, %d MiB; held %d µs, %d MiB before (decisions %+v)",
			a.CountedCPUUs(), a.CountedMem()>>20, before, beforeMem>>20, ds)
	}
}

// A container with no limits of its own (or from a daemon that does not
// report them) may take whatever the host has once its escrad falls back:
// the hold takes all the pool has left, and no live member is raised
// into it.
func TestSilentHostWithoutOwnLimitsHoldsThePool(t *testing.T) {
	a := gatedApp(t, 1, 320*MiB)
	k1, k2 := Key(1<<32|1), Key(2<<32|1)
	for _, k := range []Key{k1, k2} {
		ds, err := a.Join(Join{Key: k, HostMaxUs: 200000, CurQuotaUs: 30000, CurMem: 64 * MiB})
		if err != nil {
			t.Fatal(err)
		}
		ackAll(a, ds)
	}
	ds, _ := a.LeaveHeld(k1, "h1/c1")
	ackAll(a, ds)
	if cpu, mem := a.CPUUnallocatedUs(), a.MemUnallocated(); cpu != 0 || mem != 0 {
		t.Fatalf("pool %d µs, %d MiB after h1 went silent; want nothing left to hand out", cpu, mem>>20)
	}
	if o := a.OOM(k2, 64*MiB, 64*MiB, 4*MiB, false); o.Action == OOMGrant {
		t.Fatalf("h2 granted memory while h1, without limits of its own, may take all of it: %+v", o)
	}
}
