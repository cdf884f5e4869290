package allocator

import "testing"

// pema-guarded leaves Escra's in-period rule on: a member PEMA cut that
// runs out of quota mid-period is raised at once by max(q, U/λ) from the
// unassigned budget, the next period starts at PEMA's target again, and
// the raise is counted for the PEMA layer. The pema policy does neither.
func TestGuardedTargetsRaiseACutMemberWithinThePeriod(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		pol := NewTargets()
		if guarded {
			pol = NewGuardedTargets()
		}
		a, err := NewBooks("x", Budget{CPUCores: 1, MemoryBytes: 512 * MiB, Sigma: 0.5}, DefaultParams(), pol)
		if err != nil {
			t.Fatal(err)
		}
		a.Join(Join{Key: 1, HostMaxUs: 100000})
		a.Join(Join{Key: 2, HostMaxUs: 100000})
		pol.Set(map[Key]int64{1: 10000, 2: 10000}) // 0.1 core each
		for seq := uint64(1); seq <= 2; seq++ {
			for k := Key(1); k <= 2; k++ {
				a.CPU(k, Stat{Seq: seq, QuotaUs: a.Member(k).QuotaUs, PeriodUs: 100000, UnusedUs: 5000, UsageUs: 5000})
			}
		}
		if q := a.Member(1).QuotaUs; q != 10000 {
			t.Fatalf("guarded=%v: quota %d, want the target 10000", guarded, q)
		}
		ds, err := a.Throttle(1, 3)
		if err != nil {
			t.Fatal(err)
		}
		raised := a.Member(1).QuotaUs
		if !guarded {
			if len(ds) != 0 || raised != 10000 {
				t.Fatalf("pema: a throttle event changed the quota to %d (%+v)", raised, ds)
			}
			continue
		}
		// U = 1 − 0.2 = 0.8 core, λ = 2: +max(0.1, 0.4) = 0.5 core.
		if raised != 50000 {
			t.Fatalf("pema-guarded: quota %d after the throttle event, want 10000 + 40000", raised)
		}
		a.CPU(1, Stat{Seq: 3, QuotaUs: raised, PeriodUs: 100000, UnusedUs: 20000, Throttled: true, UsageUs: 30000})
		if q := a.Member(1).QuotaUs; q != 10000 {
			t.Fatalf("pema-guarded: quota %d in the next period, want the target 10000", q)
		}
		if u := pol.Take()[1]; u.Raised != 1 || u.Throttled != 1 || u.Periods != 3 {
			t.Fatalf("pema-guarded: usage %+v, want 1 raised and 1 throttled period of 3", u)
		}
	}
}
