package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioTelemetryBurst: with cpu.max.burst the refill carries unused
// runtime, so the pool can hold more than the quota while the group ran;
// quota − unused then reads as idle. The period hook reports the runtime
// consumed (the pool after the refill less what is left): its sum must
// match cpu.stat's usage, and some period must have run with more than
// the quota left, or the burst was not exercised and nothing is proven.
func scenarioTelemetryBurst(*harness.Env) error {
	const quota = 40 * time.Millisecond
	cg, l, done, err := watchedCgroup("tel-burst", map[string]string{"cpu.max": "40000 100000", "cpu.max.burst": "40000"})
	if err != nil {
		return err
	}
	defer done()
	// 25 ms of CPU every 700 ms: idle periods refill the pool up to
	// quota + burst (the kernel allows a burst up to the quota), so a
	// period that runs a burst ends with more than the quota left.
	w, err := cg.Start("burst", "25", "700")
	if err != nil {
		return err
	}
	defer func() { _ = w.Process.Kill(); _, _ = w.Process.Wait() }()

	time.Sleep(time.Second)
	l.drainRecords()
	u0, err := cg.Keyed("cpu.stat", "usage_usec")
	if err != nil {
		return err
	}
	var used, naive time.Duration
	n, carried := 0, 0
	deadline := time.After(5 * time.Second)
collect:
	for {
		select {
		case r := <-l.recs:
			if r.CgroupID != cg.ID {
				continue
			}
			if !r.HasUsed {
				return errors.New("record without ESCRA_REC_USED_NS: module or kernel predates it")
			}
			n++
			used += time.Duration(r.UsedNs)
			if r.UnusedNs < r.QuotaNs {
				naive += time.Duration(r.QuotaNs - r.UnusedNs)
			}
			if r.UnusedNs > r.QuotaNs && time.Duration(r.UsedNs) >= 5*time.Millisecond {
				carried++
			}
		case <-l.overrun:
			return errors.New("listener socket overflowed")
		case <-deadline:
			break collect
		}
	}
	// The last partial period is reported at the next boundary.
	time.Sleep(200 * time.Millisecond)
	for drained := false; !drained; {
		select {
		case r := <-l.recs:
			if r.CgroupID == cg.ID && r.HasUsed {
				used += time.Duration(r.UsedNs)
			}
		default:
			drained = true
		}
	}
	u1, err := cg.Keyed("cpu.stat", "usage_usec")
	if err != nil {
		return err
	}
	stat := time.Duration(u1-u0) * time.Microsecond
	diff := used - stat
	if diff < 0 {
		diff = -diff
	}
	fmt.Printf("    burst: %d records, %d ran with more than the quota (%v) left; used %v, cpu.stat %v, quota-unused would say %v\n",
		n, carried, quota, used.Round(time.Millisecond), stat.Round(time.Millisecond), naive.Round(time.Millisecond))
	if carried == 0 {
		return errors.New("no period ran with more than its quota left: the burst was not exercised")
	}
	if stat < 50*time.Millisecond {
		return fmt.Errorf("the workload used only %v of CPU: nothing to compare", stat)
	}
	if diff > stat/4+5*time.Millisecond {
		return fmt.Errorf("reported usage %v vs cpu.stat %v: differ by more than a quarter", used, stat)
	}
	return nil
}
