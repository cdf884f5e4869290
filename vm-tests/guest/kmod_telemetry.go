package main

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// tick is one scheduler tick of the test kernel (CONFIG_HZ=250): the
// accuracy Escra's per-period telemetry promises.
const tick = 4 * time.Millisecond

// scenarioTelemetry checks per-period records: a CPU hog under 20 ms / 100 ms
// gives one throttled record per period with ~0 unused; a half-busy group
// gives unused ≈ quota − usage (Escra §III).
func scenarioTelemetry(*harness.Env) error {
	const quota, period = 20 * time.Millisecond, 100 * time.Millisecond
	hogCg, err := harness.NewCgroup("tel-hog")
	if err != nil {
		return err
	}
	defer hogCg.Remove()
	halfCg, err := harness.NewCgroup("tel-half")
	if err != nil {
		return err
	}
	defer halfCg.Remove()
	for _, cg := range []*harness.Cgroup{hogCg, halfCg} {
		if err := cg.Set("cpu.max", "20000 100000"); err != nil {
			return err
		}
	}
	l, err := listen(kmod.GroupTelemetry)
	if err != nil {
		return err
	}
	defer l.close()
	ctl, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	for _, cg := range []*harness.Cgroup{hogCg, halfCg} {
		if err := ctl.Watch(cg.ID); err != nil {
			return err
		}
		defer func(id uint64) { _ = ctl.Unwatch(id) }(cg.ID)
	}
	hog, err := hogCg.Start("hog-cpu")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	half, err := halfCg.Start("busy", "10", "100")
	if err != nil {
		return err
	}
	defer func() { _ = half.Process.Kill(); _, _ = half.Process.Wait() }()

	time.Sleep(time.Second) // warm-up: start-up costs, first partial periods
	l.drainRecords()
	u0, err := halfCg.Keyed("cpu.stat", "usage_usec")
	if err != nil {
		return err
	}
	t0 := time.Now()
	window := 4 * time.Second
	recs := map[uint64][]source.Record{}
	deadline := time.After(window)
collect:
	for {
		select {
		case r := <-l.recs:
			recs[r.CgroupID] = append(recs[r.CgroupID], r)
		case <-l.overrun:
			return errors.New("listener socket overflowed")
		case <-deadline:
			break collect
		}
	}
	u1, err := halfCg.Keyed("cpu.stat", "usage_usec")
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)

	// CPU hog: one record per period, throttled, nothing left unused.
	hr := recs[hogCg.ID]
	minRecs := int(window/period) * 3 / 4
	if len(hr) < minRecs {
		return fmt.Errorf("hog: %d records in %v, want >= %d (one per %v period)", len(hr), window, minRecs, period)
	}
	var gaps []time.Duration
	ones, starved := 0, 0
	for i, r := range hr {
		if r.QuotaNs != uint64(quota) || r.PeriodNs != uint64(period) {
			return fmt.Errorf("hog record %d: quota %d period %d, want %d/%d", i, r.QuotaNs, r.PeriodNs, quota, period)
		}
		switch {
		case !r.Throttled && time.Duration(r.UnusedNs) <= tick:
			return fmt.Errorf("hog record %d (seq %d): quota used up (unused %v) but not throttled", i, r.Seq, time.Duration(r.UnusedNs))
		case !r.Throttled:
			// The flag is exact: a period in which the emulated CPU
			// did not run the hog for its quota (host contention
			// under TCG) was not throttled.
			starved++
		case time.Duration(r.UnusedNs) > tick:
			return fmt.Errorf("hog record %d (seq %d): throttled with unused %v, want <= one tick (%v)", i, r.Seq, time.Duration(r.UnusedNs), tick)
		}
		if i > 0 {
			// seq advances by the periods the timer covered: 1, or more
			// when a busy host delayed the (emulated) timer interrupt.
			d := r.Seq - hr[i-1].Seq
			if r.Seq <= hr[i-1].Seq || d > 5 {
				return fmt.Errorf("hog: seq %d follows %d: not one record per period", r.Seq, hr[i-1].Seq)
			}
			if d == 1 {
				ones++
			}
			gaps = append(gaps, time.Duration(r.TimestampNs-hr[i-1].TimestampNs))
		}
	}
	if ones < len(gaps)*9/10 {
		return fmt.Errorf("hog: only %d of %d consecutive records are one period apart", ones, len(gaps))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	med := gaps[len(gaps)/2]
	if med < period*9/10 || med > period*11/10 {
		return fmt.Errorf("hog: median record spacing %v, want ~%v", med, period)
	}
	fmt.Printf("    hog: %d records, %d throttled with unused <= %v, %d starved by the host (not throttled, quota not used), median spacing %v, nr_throttled %d\n",
		len(hr), len(hr)-starved, tick, starved, med, hr[len(hr)-1].NrThrottled)
	if starved > len(hr)/10 {
		return fmt.Errorf("hog: %d of %d periods without its quota: the host starved the guest, nothing proven", starved, len(hr))
	}

	// Half-busy: unused ≈ quota − usage, usage taken from cpu.stat.
	fr := recs[halfCg.ID]
	if len(fr) < minRecs {
		return fmt.Errorf("half-busy: %d records in %v, want >= %d", len(fr), window, minRecs)
	}
	var usedSum time.Duration
	for _, r := range fr {
		usedSum += time.Duration(r.QuotaNs) - time.Duration(r.UnusedNs)
	}
	usedPerPeriod := usedSum / time.Duration(len(fr))
	statPerPeriod := time.Duration((u1-u0)*1000) * period / elapsed
	diff := usedPerPeriod - statPerPeriod
	if diff < 0 {
		diff = -diff
	}
	fmt.Printf("    half-busy: %d records, quota-unused %v/period, cpu.stat usage %v/period, diff %v\n",
		len(fr), usedPerPeriod.Round(time.Microsecond), statPerPeriod.Round(time.Microsecond), diff.Round(time.Microsecond))
	if statPerPeriod < 2*time.Millisecond || statPerPeriod > 18*time.Millisecond {
		return fmt.Errorf("half-busy workload used %v per period, want ~10ms: the workload itself misbehaved", statPerPeriod)
	}
	if diff > tick {
		return fmt.Errorf("half-busy: quota-unused %v/period vs usage %v/period: differ by more than one tick", usedPerPeriod, statPerPeriod)
	}
	return nil
}

// scenarioTelemetryDrops: a listener whose socket is full makes the
// multicast fail with -ESRCH like no listener at all; those records are
// lost and must be counted. With no listener they are not wanted and not
// counted.
func scenarioTelemetryDrops(*harness.Env) error {
	cg, err := harness.NewCgroup("tel-drops")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("cpu.max", "1000 2000"); err != nil { // 500 periods a second
		return err
	}
	ctl, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.Watch(cg.ID); err != nil {
		return err
	}
	defer func() { _ = ctl.Unwatch(cg.ID) }()
	hog, err := cg.Start("hog-cpu")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()

	// A listener that never reads, with the smallest buffer.
	deaf, err := kmod.Dial()
	if err != nil {
		return err
	}
	_ = deaf.SetReadBuffer(1)
	if err := deaf.Join(kmod.GroupTelemetry); err != nil {
		deaf.Close()
		return err
	}
	s0, err := ctl.Stats()
	if err != nil {
		deaf.Close()
		return err
	}
	time.Sleep(2 * time.Second)
	s1, err := ctl.Stats()
	deaf.Close()
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // the drain in flight
	s2, err := ctl.Stats()
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	s3, err := ctl.Stats()
	if err != nil {
		return err
	}
	fmt.Printf("    full listener, 2 s: sent +%d, dropped +%d; no listener, 2 s: sent +%d, dropped +%d\n",
		s1.RecordsSent-s0.RecordsSent, s1.RecordsDropped-s0.RecordsDropped,
		s3.RecordsSent-s2.RecordsSent, s3.RecordsDropped-s2.RecordsDropped)
	if s1.RecordsDropped-s0.RecordsDropped < 50 {
		return fmt.Errorf("a full listener's lost records not counted: dropped +%d in 2 s at 500 periods/s", s1.RecordsDropped-s0.RecordsDropped)
	}
	if s3.RecordsDropped != s2.RecordsDropped || s3.RecordsSent != s2.RecordsSent {
		return fmt.Errorf("with no listener: sent +%d, dropped +%d, want 0 and 0", s3.RecordsSent-s2.RecordsSent, s3.RecordsDropped-s2.RecordsDropped)
	}
	return nil
}

// scenarioThrottleAlternate: a group that needs 25 ms of CPU every 230 ms
// under a 20 ms / 100 ms quota is throttled in one period and runs 5 ms
// in the next. The next period must not be reported as throttled: a
// period that left half its quota unused was never throttled (a throttle
// empties the group's pool). The counters the old flag was derived from
// move after the boundary, which marked it throttled too.
func scenarioThrottleAlternate(*harness.Env) error {
	const quota = 20 * time.Millisecond
	cg, l, done, err := watchedCgroup("thr-alt", map[string]string{"cpu.max": "20000 100000"})
	if err != nil {
		return err
	}
	defer done()
	w, err := cg.Start("burst", "25", "230")
	if err != nil {
		return err
	}
	defer func() { _ = w.Process.Kill(); _, _ = w.Process.Wait() }()

	time.Sleep(time.Second)
	l.drainRecords()
	var recs []source.Record
	deadline := time.After(8 * time.Second)
collect:
	for {
		select {
		case r := <-l.recs:
			if r.CgroupID == cg.ID {
				recs = append(recs, r)
			}
		case <-l.overrun:
			return errors.New("listener socket overflowed")
		case <-deadline:
			break collect
		}
	}
	throttled, falseFlags, after, afterOK := 0, 0, 0, 0
	for i, r := range recs {
		idle := time.Duration(r.UnusedNs) >= quota/2
		if r.Throttled {
			throttled++
			if idle {
				falseFlags++
				fmt.Printf("    seq %d: throttled with %v of %v unused\n", r.Seq, time.Duration(r.UnusedNs), quota)
			}
		}
		if i > 0 && recs[i-1].Throttled && r.Seq == recs[i-1].Seq+1 && idle {
			after++
			if !r.Throttled {
				afterOK++
			}
		}
	}
	fmt.Printf("    %d records, %d throttled, %d periods right after a throttled one with >= half the quota unused (%d reported unthrottled), %d false throttle flags\n",
		len(recs), throttled, after, afterOK, falseFlags)
	if len(recs) < 40 {
		return fmt.Errorf("%d records in 8 s, want >= 40", len(recs))
	}
	if throttled < 5 || after < 3 {
		return fmt.Errorf("the workload did not alternate (throttled %d, after %d): nothing proven", throttled, after)
	}
	if falseFlags > 0 {
		return fmt.Errorf("%d periods reported throttled that were not", falseFlags)
	}
	return nil
}

// burst burns args[0] ms of CPU time (not wall time: throttled time does
// not count) every args[1] ms of wall time, until killed.
func burst(args []string) int {
	burn := time.Duration(harness.AtoiArg(args, 0, 25)) * time.Millisecond
	every := time.Duration(harness.AtoiArg(args, 1, 230)) * time.Millisecond
	cpu := func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	next := time.Now()
	for {
		for c0 := cpu(); cpu()-c0 < burn; {
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
}

// watchedCgroup makes cgroup name with the given files set, watched by a
// new socket, and a telemetry listener; done undoes all of it.
func watchedCgroup(name string, files map[string]string) (_ *harness.Cgroup, _ *listener, _ func(), err error) {
	var undo []func()
	undoAll := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			undoAll()
		}
	}()
	cg, err := harness.NewCgroup(name)
	if err != nil {
		return nil, nil, nil, err
	}
	undo = append(undo, cg.Remove)
	for _, f := range []string{"cpu.max", "cpu.max.burst"} { // cpu.max first: the burst needs a quota
		if v, ok := files[f]; ok {
			if err := cg.Set(f, v); err != nil {
				return nil, nil, nil, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	l, err := listen(kmod.GroupTelemetry)
	if err != nil {
		return nil, nil, nil, err
	}
	undo = append(undo, l.close)
	ctl, err := kmod.Dial()
	if err != nil {
		return nil, nil, nil, err
	}
	undo = append(undo, func() { ctl.Close() })
	if err := ctl.Watch(cg.ID); err != nil {
		return nil, nil, nil, err
	}
	undo = append(undo, func() { _ = ctl.Unwatch(cg.ID) })
	return cg, l, undoAll, nil
}
