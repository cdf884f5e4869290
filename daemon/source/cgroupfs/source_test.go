package cgroupfs

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/procstat"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

type recSink struct {
	mu      sync.Mutex
	stats   []*pb.CpuStat
	at      []time.Time // when each arrived
	flushes int
}

func (r *recSink) CPU(s *pb.CpuStat) {
	r.mu.Lock()
	r.stats = append(r.stats, &pb.CpuStat{Handle: s.Handle, PeriodSeq: s.PeriodSeq, QuotaUs: s.QuotaUs, UnusedUs: s.UnusedUs,
		Throttled: s.Throttled, NrThrottled: s.NrThrottled, ThrottledUs: s.ThrottledUs, UsageUs: s.UsageUs, PeriodUs: s.PeriodUs,
		MidPeriod: s.MidPeriod})
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
}
func (r *recSink) Flush()           { r.mu.Lock(); r.flushes++; r.mu.Unlock() }
func (r *recSink) OOM(rescue.Event) {}

// A busy group capped at 5 ms per 100 ms is throttled every period and
// leaves nothing unused; an idle one sends nothing (gaps mean unused).
func TestCgroupfsRecordsBusyAndIdleGroups(t *testing.T) {
	busy := cgtest.New(t, "tel-busy")
	idle := cgtest.New(t, "tel-idle")
	spin := cgtest.Workload(t, "spin")
	for _, rel := range []string{busy, idle} {
		cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
		// 5 ms per 100 ms: far below a fair share even on a loaded
		// 2-core machine, so the spinner really hits the quota.
		cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "5000")
	}
	p, err := cgtest.Start(busy, spin, "-threads", "1", "-for", "20s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	src, err := NewSource(100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	src.Limits = func(uint32) (int64, uint32) { return 5000, 100000 }
	for h, rel := range map[uint32]string{1: busy, 2: idle} {
		paths, err := cgroups.PathsForCgroup(rel)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cgroups.Open(paths)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		if err := src.Watch(h, g); err != nil {
			t.Fatal(err)
		}
	}
	sink := &recSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 1300*time.Millisecond)
	defer cancel()
	if err := src.Run(ctx, sink); err != nil {
		t.Fatal(err)
	}
	var busyN, throttled, idleN int
	var busyUsage uint64
	for _, s := range sink.stats {
		if s.MidPeriod {
			continue // throttle events (the watcher is on): throttle_test.go
		}
		switch s.Handle {
		case 1:
			busyN++
			busyUsage += s.UsageUs
			if s.Throttled {
				throttled++
			}
			if s.QuotaUs != 5000 {
				t.Errorf("busy quota %d", s.QuotaUs)
			}
		case 2:
			idleN++
			if s.Throttled || s.UnusedUs < 19000 || s.UsageUs > 1000 {
				t.Errorf("idle record %v", s)
			}
		}
	}
	if busyN < 8 || sink.flushes < 9 {
		t.Fatalf("%d busy records, %d flushes in 1.3 s at 100 ms", busyN, sink.flushes)
	}
	// An empty group's periods are all idle: sent as gaps in period_seq.
	if idleN != 0 {
		t.Errorf("%d records for a group with no tasks; idle periods should be gaps", idleN)
	}
	var last uint64
	for _, s := range sink.stats {
		if s.Handle == 1 && !s.MidPeriod {
			if last != 0 && s.PeriodSeq != last+1 {
				t.Errorf("busy group period_seq jumped %d -> %d", last, s.PeriodSeq)
			}
			last = s.PeriodSeq
		}
	}
	if throttled < busyN/2 {
		t.Errorf("busy group throttled in %d of %d periods", throttled, busyN)
	}
	// Usage per period stays near the 5 ms quota (sampling phase jitter
	// moves a little between periods).
	if avg := busyUsage / uint64(busyN); avg < 2500 || avg > 8000 {
		t.Errorf("busy usage %d µs per period, want about 5000", avg)
	}
}

// Groups under an idle parent are skipped with one read of the parent; a
// member that starts running is still reported in the next periods.
func TestIdleParentShortcutStillSeesWakeUps(t *testing.T) {
	parent := cgtest.New(t, "tel-parent")
	child := parent + "/a"
	if err := cgtest.Make(child); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cgtest.Remove(child) })
	spin := cgtest.Workload(t, "spin")
	src, err := NewSource(100*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	src.Limits = func(uint32) (int64, uint32) { return -1, 0 }
	paths, err := cgroups.PathsForCgroup(child)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroups.Open(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	if err := src.Watch(1, g); err != nil {
		t.Fatal(err)
	}
	sink := &recSink{}
	// 0.6 s idle (gaps), then a spinner for the rest of the 2.5 s. How much
	// CPU it gets depends on the host's load (two busy loops leave it a
	// third of a core or less), so a busy record is one in which it ran
	// at all (> 1 ms), not one in which it got a core.
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	go func() {
		time.Sleep(600 * time.Millisecond)
		p, err := cgtest.Start(child, spin, "-for", "1800ms")
		if err == nil {
			t.Cleanup(p.Kill)
		}
	}()
	if err := src.Run(ctx, sink); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var busy int
	for _, s := range sink.stats {
		if s.UsageUs > 1000 {
			busy++
		}
	}
	if busy < 3 {
		t.Fatalf("%d busy records after the child woke up (records %v)", busy, sink.stats)
	}
	// 25 periods, the first 6 idle: records for them would make more.
	if len(sink.stats) > 20 {
		t.Fatalf("%d records: idle periods before the wake-up should be gaps", len(sink.stats))
	}
}

// A late tick (the host was busy) gives one record whose usage is scaled to
// one period; the early tick after it (aligned to the period) is folded
// into the next record instead of showing a throttled group as idle.
//
// The spinner is stopped (SIGSTOP) around every sample and the test passes
// the sample times itself, so the expected figures follow from the cgroup's
// own counter whatever CPU the spinner got on a loaded machine.
func TestCgroupfsLateAndEarlyTicks(t *testing.T) {
	rel := cgtest.New(t, "tel-late")
	spin := cgtest.Workload(t, "spin")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "5000")
	p, err := cgtest.Start(rel, spin, "-threads", "1", "-for", "60s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	pid := p.Cmd.Process.Pid
	usage := func() uint64 {
		n, err := strconv.ParseUint(cgtest.Read(t, "cpuacct", rel, "cpuacct.usage"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// run lets the spinner use at least d of CPU, then stops it and
	// returns the group's cumulative usage (ns), which stays put until the
	// next run.
	run := func(d time.Duration) uint64 {
		t.Helper()
		from := usage()
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); usage()-from < uint64(d); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the spinner used %d ns of CPU in 30 s", usage()-from)
			}
		}
		stopAll(t, pid)
		return usage()
	}
	paths, err := cgroups.PathsForCgroup(rel)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroups.Open(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	const period = 100 * time.Millisecond
	const quotaUs = 5000
	c := &Source{Period: period, Limits: func(uint32) (int64, uint32) { return quotaUs, 100000 }}
	s := &sampled{h: 1, g: g}
	var st pb.CpuStat
	buf := make([]byte, 512)
	u0 := run(time.Millisecond)
	t0 := time.Now()
	if c.sample(s, &st, buf, period, t0) {
		t.Fatal("the first sample only takes the baseline")
	}
	// Late: the next tick comes four periods later.
	u1 := run(4 * time.Millisecond)
	t1 := t0.Add(4 * period)
	if !c.sample(s, &st, buf, period, t1) {
		t.Fatal("no record for a window in which the group ran")
	}
	du := (u1 - u0) / 1000
	if want := du / 4; st.UsageUs != want {
		t.Errorf("late record usage %d us; the group used %d us in four periods, want %d per period", st.UsageUs, du, want)
	}
	if want := max(quotaUs-int64(du/4), 0); st.UnusedUs != want {
		t.Errorf("late record unused %d us, want quota - usage = %d", st.UnusedUs, want)
	}
	seq := st.PeriodSeq
	// Early: 30 ms later, and the group ran meanwhile. Folded: no record,
	// the baseline of t1 kept.
	u2 := run(time.Millisecond)
	if c.sample(s, &st, buf, period, t1.Add(30*time.Millisecond)) {
		t.Errorf("a 30 ms window was reported: %v", &st)
	}
	u3 := run(time.Millisecond)
	if !c.sample(s, &st, buf, period, t1.Add(period)) {
		t.Fatal("no record for the window after the folded one")
	}
	if st.PeriodSeq != seq+1 {
		t.Errorf("period_seq %d after %d: the folded window took a sequence number", st.PeriodSeq, seq)
	}
	// One period since t1: the usage of both runs, unscaled.
	if want := (u3 - u1) / 1000; st.UsageUs != want {
		t.Errorf("record after the fold: usage %d us, want %d (the early window's %d us included)", st.UsageUs, want, (u2-u1)/1000)
	}
	if want := max(quotaUs-int64((u3-u1)/1000), 0); st.UnusedUs != want {
		t.Errorf("record after the fold: unused %d us, want %d", st.UnusedUs, want)
	}
}

// stopAll sends SIGSTOP to pid and waits until every thread of it is
// stopped, so its cgroup's usage no longer moves.
func stopAll(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tids, err := procstat.Threads(pid)
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, st := range tids {
			if st.State == 'T' {
				stopped++
			}
		}
		if stopped == len(tids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d threads of %d stopped after SIGSTOP", stopped, len(tids), pid)
		}
	}
}
