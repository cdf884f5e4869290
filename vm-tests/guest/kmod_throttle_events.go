package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/kmod"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioThrottleEvents: the scheduler tells the module when a watched
// group throttles (and, at throttle_near_permille, when it nearly does)
// while the period is still running, so escrad can grant quota inside
// the period instead of after it (Escra §IV-B, the sub-period reaction).
//   - busy: a hog at a 20 ms quota throttles every period; each throttled
//     period record must be preceded by a throttle event inside that
//     period, tens of ms before its end, and by a near event before that;
//   - light: a group far below its quota sends (almost) no events;
//   - near off: throttle_near_permille=0 leaves throttle events only;
//   - the module counts the events and drops none;
//   - escrad's kernel backend turns them into mid-period stats numbered
//     as the period they happened in.
func scenarioThrottleEvents(*harness.Env) error {
	if _, err := os.Stat(kmod.NearParam); err != nil {
		return fmt.Errorf("escra.ko has no throttle events (%v): kernel or module predates patch 4", err)
	}
	st0, err := moduleStats()
	if err != nil {
		return err
	}
	if err := throttleEventsBusy(); err != nil {
		return fmt.Errorf("busy: %w", err)
	}
	if err := throttleEventsLight(); err != nil {
		return fmt.Errorf("light: %w", err)
	}
	if err := throttleEventsNearOff(); err != nil {
		return fmt.Errorf("near off: %w", err)
	}
	if err := throttleEventsStats(st0); err != nil {
		return err
	}
	return throttleEventsBackend()
}

// collect gathers a group's period records and events for d.
func collect(l *listener, id uint64, d time.Duration) (recs, evs []source.Record, err error) {
	deadline := time.After(d)
	for {
		select {
		case r := <-l.recs:
			if r.CgroupID == id {
				recs = append(recs, r)
			}
		case r := <-l.events:
			if r.CgroupID == id {
				evs = append(evs, r)
			}
		case <-l.overrun:
			return nil, nil, errors.New("listener socket overflowed")
		case <-deadline:
			return recs, evs, nil
		}
	}
}

// watchedHog runs a hog in a watched cgroup at a 20 ms quota and returns
// its period records and events over d, after it settled.
func watchedHog(name string, d time.Duration) (recs, evs []source.Record, err error) {
	cg, l, done, err := watchedCgroup(name, map[string]string{"cpu.max": "20000 100000"})
	if err != nil {
		return nil, nil, err
	}
	defer done()
	hog, err := cg.Start("hog-cpu")
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	time.Sleep(500 * time.Millisecond)
	l.drainRecords()
	return collect(l, cg.ID, d)
}

func throttleEventsBusy() error {
	recs, evs, err := watchedHog("thr-busy", 5*time.Second)
	if err != nil {
		return err
	}
	var leads []time.Duration
	throttled, matched, nearFirst := 0, 0, 0
	for i := 1; i < len(recs); i++ {
		prev, r := recs[i-1], recs[i]
		if !r.Throttled {
			continue
		}
		throttled++
		var thr, near *source.Record
		for j := range evs {
			e := &evs[j]
			if e.TimestampNs <= prev.TimestampNs || e.TimestampNs > r.TimestampNs {
				continue
			}
			switch e.Kind {
			case source.KindThrottle:
				thr = e
			case source.KindNear:
				near = e
			}
		}
		if thr == nil {
			continue
		}
		matched++
		leads = append(leads, time.Duration(r.TimestampNs-thr.TimestampNs))
		if !thr.Throttled || thr.QuotaNs != 20e6 || thr.PeriodNs != 100e6 || thr.UsedNs < 15e6 {
			return fmt.Errorf("throttle event %+v: want throttled, quota 20 ms, >= 15 ms used", *thr)
		}
		if near != nil && near.TimestampNs <= thr.TimestampNs {
			nearFirst++
		}
	}
	slices.Sort(leads)
	var lead time.Duration
	if len(leads) > 0 {
		lead = leads[len(leads)/2]
	}
	fmt.Printf("    busy: %d records, %d throttled, %d with their throttle event (median %v before the period's end), %d with a near event first; %d events\n",
		len(recs), throttled, matched, lead.Round(time.Millisecond), nearFirst, len(evs))
	if throttled < 20 {
		return fmt.Errorf("%d throttled periods of %d: the hog did not hit its quota", throttled, len(recs))
	}
	// A throttle can be released within the period by slack or fall on
	// the boundary; nearly all must be seen as they happen.
	if matched < throttled*9/10 {
		return fmt.Errorf("only %d of %d throttled periods had a throttle event inside them", matched, throttled)
	}
	// The quota is 20 % of the period: the throttle comes ~80 ms early.
	if lead < 40*time.Millisecond {
		return fmt.Errorf("median lead %v: events do not arrive while the period runs", lead)
	}
	// Near events are as coarse as the runtime slices (5 ms at a 20 ms
	// quota), and the refill's unthrottle takes runtime without a check:
	// many throttles come without one, but not most.
	if nearFirst < matched/4 {
		return fmt.Errorf("%d of %d throttles had a near event first (threshold 950 permille)", nearFirst, matched)
	}
	return nil
}

func throttleEventsLight() error {
	cg, l, done, err := watchedCgroup("thr-light", map[string]string{"cpu.max": "50000 100000"})
	if err != nil {
		return err
	}
	defer done()
	// 5 ms of CPU every 100 ms: a tenth of the quota.
	w, err := cg.Start("busy", "5", "100")
	if err != nil {
		return err
	}
	defer func() { _ = w.Process.Kill(); _, _ = w.Process.Wait() }()
	time.Sleep(300 * time.Millisecond)
	l.drainRecords()
	recs, evs, err := collect(l, cg.ID, 3*time.Second)
	if err != nil {
		return err
	}
	throttled := 0
	for _, r := range recs {
		if r.Throttled {
			throttled++
		}
	}
	fmt.Printf("    light: %d records, %d throttled, %d events\n", len(recs), throttled, len(evs))
	if len(recs) < 10 {
		return fmt.Errorf("%d records in 3 s: the group was not reported", len(recs))
	}
	// A scheduling hiccup may make one period throttle; an event without
	// a throttled period (or near) would be a false alarm per period.
	if len(evs) > 2*throttled+2 {
		return fmt.Errorf("%d events for %d throttled periods at a tenth of the quota", len(evs), throttled)
	}
	return nil
}

func throttleEventsNearOff() error {
	old := strings.TrimSpace(harness.ReadProc(kmod.NearParam))
	if err := os.WriteFile(kmod.NearParam, []byte("0"), 0o644); err != nil {
		return err
	}
	defer func() { _ = os.WriteFile(kmod.NearParam, []byte(old), 0o644) }()
	_, evs, err := watchedHog("thr-nonear", 2*time.Second)
	if err != nil {
		return err
	}
	thr, near := 0, 0
	for _, e := range evs {
		switch e.Kind {
		case source.KindThrottle:
			thr++
		case source.KindNear:
			near++
		}
	}
	fmt.Printf("    near off: %d throttle events, %d near\n", thr, near)
	if thr < 10 || near != 0 {
		return fmt.Errorf("%d throttle and %d near events with the threshold off: want >= 10 and 0", thr, near)
	}
	// Out of range is refused by the module, not clamped silently.
	if err := os.WriteFile(kmod.NearParam, []byte("1000"), 0o644); err == nil {
		return errors.New("throttle_near_permille=1000 accepted")
	}
	return nil
}

func moduleStats() (kmod.Stats, error) {
	c, err := kmod.Dial()
	if err != nil {
		return kmod.Stats{}, err
	}
	defer c.Close()
	return c.Stats()
}

// throttleEventsStats: the module's counters over this scenario (earlier
// scenarios drop records on purpose).
func throttleEventsStats(st0 kmod.Stats) error {
	st, err := moduleStats()
	if err != nil {
		return err
	}
	ev, sent, dropped := st.Events-st0.Events, st.RecordsSent-st0.RecordsSent, st.RecordsDropped-st0.RecordsDropped
	fmt.Printf("    module: %d events, %d records sent, %d dropped in this scenario\n", ev, sent, dropped)
	if ev < 100 {
		return fmt.Errorf("ESCRA_STAT_EVENTS rose by %d while two hogs throttled for 7 s", ev)
	}
	if dropped != 0 {
		return fmt.Errorf("%d records dropped", dropped)
	}
	return nil
}

// throttleEventsBackend runs escrad's kernel backend: mid-period stats
// arrive before the record of the period they name, which is throttled.
func throttleEventsBackend() error {
	src, err := kmod.NewSource(100*time.Millisecond, nil)
	if err != nil {
		return err
	}
	cg, err := harness.NewCgroup("thr-src")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("cpu.max", "20000 100000"); err != nil {
		return err
	}
	return backendEvents("kernel backend", src, cgroups.Paths{Version: cgroups.V2, Unified: cg.Path},
		func() (*exec.Cmd, error) { return cg.Start("hog-cpu") })
}

// backendEvents runs a backend (source.Source, as the agent does) on a
// group whose quota is 20 ms of 100 ms while start's hog runs in it, and
// checks the stream it delivers (checkEventStream). A group without a
// memory controller (the v1 cpu hierarchy here) gets no OOM trap, which
// the bpf backend's Watch reports after setting up the telemetry: that
// error is printed, not fatal, when paths has no memory directory.
func backendEvents(backend string, src source.Source, paths cgroups.Paths, start func() (*exec.Cmd, error)) error {
	g, err := cgroups.Open(paths)
	if err != nil {
		return err
	}
	defer g.Close()
	const h = 9
	if err := src.Watch(h, g); err != nil {
		if paths.Version == cgroups.V2 || paths.Memory != "" {
			return err
		}
		fmt.Printf("    %s: no OOM trap without a memory hierarchy (%v)\n", backend, err)
	}
	sink := &recSink{}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(ctx, sink) }()
	defer func() { cancel(); <-runDone }()
	hog, err := start()
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	time.Sleep(4 * time.Second)
	src.Unwatch(h)
	if err := ctxErr(runDone); err != nil {
		return err
	}
	return checkEventStream(backend, sink)
}

// checkEventStream checks what a backend handed the agent for a hog at a
// 20 ms quota: period stats, and mid-period stats that come before the
// record of the period they name, which is throttled.
func checkEventStream(backend string, sink *recSink) error {
	sink.mu.Lock()
	stats, at := append([]*pb.CpuStat(nil), sink.stats...), append([]time.Time(nil), sink.at...)
	sink.mu.Unlock()
	periods := map[uint64]int{} // seq -> index of its record
	first := -1                 // the first period record: the watch began inside it
	for i, st := range stats {
		if !st.MidPeriod {
			periods[st.PeriodSeq] = i
			if first < 0 {
				first = i
			}
		}
	}
	var leads []time.Duration
	mid, named := 0, 0
	for i, st := range stats {
		if !st.MidPeriod {
			continue
		}
		mid++
		j, ok := periods[st.PeriodSeq]
		if !ok || j < i || j == first {
			// The last period, a partial first one (its flag may predate
			// the watch), or named wrong: counted below.
			continue
		}
		if !stats[j].Throttled {
			return fmt.Errorf("%s: event for period %d, whose record says not throttled", backend, st.PeriodSeq)
		}
		named++
		leads = append(leads, at[j].Sub(at[i]))
	}
	slices.Sort(leads)
	var lead time.Duration
	if len(leads) > 0 {
		lead = leads[len(leads)/2]
	}
	fmt.Printf("    %s: %d stats, %d mid-period, %d before their period's record (median %v earlier)\n",
		backend, len(stats), mid, named, lead.Round(time.Millisecond))
	if len(stats)-mid < 20 {
		return fmt.Errorf("%s: %d period stats in 4 s", backend, len(stats)-mid)
	}
	// The hog uses its whole quota: nearly every period is throttled
	// with ~20 ms used (the first may be partial).
	full, nper := 0, 0
	for _, st := range stats {
		if st.MidPeriod {
			continue
		}
		nper++
		if st.Throttled && st.UsageUs >= 15000 && st.QuotaUs == 20000 {
			full++
		}
	}
	fmt.Printf("    %s: %d of %d period stats throttled with >= 15 ms of the 20 ms quota used\n", backend, full, nper)
	if full < nper*8/10 {
		return fmt.Errorf("%s: only %d of %d periods of a hog read as throttled at its quota", backend, full, nper)
	}
	if mid < 10 || named < mid*8/10 {
		return fmt.Errorf("%s: %d mid-period stats, %d named the period they came in: want >= 10 and 80 %%", backend, mid, named)
	}
	if lead < 30*time.Millisecond {
		return fmt.Errorf("%s: median lead %v: events reach escrad only with the period record", backend, lead)
	}
	return nil
}
