package cgroupfs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
)

// fakeGroup is a v1 group of plain files in a temp dir: the watcher reads
// them with the same preads as real control files, and the test sets
// nr_throttled exactly.
type fakeGroup struct {
	dir string
	g   *cgroups.Group
}

func newFakeGroup(t *testing.T) *fakeGroup {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "grp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fakeGroup{dir: dir}
	f.write(t, "cpu.cfs_quota_us", "20000")
	f.write(t, "memory.limit_in_bytes", "1073741824")
	f.write(t, "cpuacct.usage", fmt.Sprintf("%020d", 0))
	f.stat(t, 0)
	g, err := cgroups.Open(cgroups.Paths{Version: cgroups.V1, CPU: dir, CPUAcct: dir, Memory: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	f.g = g
	return f
}

// write replaces a file's content in place with one pwrite (the open
// descriptor sees it). Numbers are fixed-width so the length never
// changes: a concurrent reader never sees a truncated file.
func (f *fakeGroup) write(t testing.TB, name, val string) {
	w, err := os.OpenFile(filepath.Join(f.dir, name), os.O_WRONLY|os.O_CREATE, 0o644)
	if err == nil {
		_, err = w.WriteAt([]byte(val+"\n"), 0)
		w.Close()
	}
	if err != nil {
		t.Error(err)
	}
}

func (f *fakeGroup) stat(t testing.TB, nr uint64) {
	f.write(t, "cpu.stat", fmt.Sprintf("nr_periods %012d\nnr_throttled %012d\nthrottled_time %015d", nr+10, nr, nr*1000000))
}

// Exactly one event per rise of nr_throttled, none while it stays, none
// for a group without a quota; each carries the period in progress and
// leaves in one flush.
func TestThrottleWatcherOneEventPerRise(t *testing.T) {
	f := newFakeGroup(t)
	quota := int64(20000)
	c := &Source{Limits: func(uint32) (int64, uint32) { return quota, 100000 }, groups: map[uint32]*sampled{}}
	s := &sampled{h: 3, g: f.g, seq: 41}
	c.groups[3] = s
	parents := c.regroup(map[string]*parentGroup{}, nil)
	sink := &recSink{}
	buf := make([]byte, 512)
	poll := func(nr uint64) {
		f.stat(t, nr)
		evs := c.pollThrottle(parents, nil, buf)
		for i := range evs {
			sink.CPU(&evs[i])
		}
		if len(evs) > 0 {
			sink.Flush()
		}
	}
	poll(5) // baseline
	poll(5)
	if len(sink.stats) != 0 || sink.flushes != 0 {
		t.Fatalf("events without a rise: %v, %d flushes", sink.stats, sink.flushes)
	}
	poll(6)
	poll(6)
	poll(6)
	s.seq++ // a period record went out
	poll(9) // several throttled periods between two polls: one event
	poll(9)
	quota = -1
	poll(12) // no quota: not watched
	quota = 20000
	poll(12) // the baseline is taken anew: no event for what happened unwatched
	poll(13)
	want := []struct{ nr, seq uint64 }{{6, 41}, {9, 42}, {13, 42}}
	if len(sink.stats) != len(want) || sink.flushes != len(want) {
		t.Fatalf("%d events, %d flushes; want %d each: %v", len(sink.stats), sink.flushes, len(want), sink.stats)
	}
	for i, w := range want {
		e := sink.stats[i]
		if !e.MidPeriod || e.Handle != 3 || e.NrThrottled != w.nr || e.PeriodSeq != w.seq || e.QuotaUs != 20000 ||
			e.UsageUs != 0 || e.Throttled {
			t.Errorf("event %d: %v, want nr %d seq %d", i, e, w.nr, w.seq)
		}
	}
}

// Through Run, with the period sampler on the same files: an event names
// the period whose record comes next, period records are unchanged by the
// watcher (no MidPeriod, the usual throttled flag), and no event repeats.
func TestThrottleWatcherInRunNamesThePeriodInProgress(t *testing.T) {
	f := newFakeGroup(t)
	c := &Source{Period: 50 * time.Millisecond, ThrottlePoll: 2 * time.Millisecond, NoParentShortcut: true,
		Limits: func(uint32) (int64, uint32) { return 20000, 100000 }, groups: map[uint32]*sampled{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.groups[1] = &sampled{h: 1, g: f.g}
	c.dirty = true
	sink := &recSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	var nr, usage atomic.Uint64
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		// The group runs all the time and is throttled every 35 ms.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			usage.Add(2_000_000)
			if i%7 == 0 {
				nr.Add(1)
			}
			// Write usage before cpu.stat: a record never sees a rise
			// without usage.
			f.write(t, "cpuacct.usage", fmt.Sprintf("%020d", usage.Load()))
			f.stat(t, nr.Load())
		}
	}()
	err := c.sampleLoop(ctx, sink)
	<-writer
	if err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var events, records int
	lastNr := uint64(0)
	for i, s := range sink.stats {
		if !s.MidPeriod {
			records++
			if s.UsageUs == 0 {
				t.Errorf("record %v without usage", s)
			}
			continue
		}
		events++
		if s.NrThrottled <= lastNr {
			t.Errorf("event %v repeats nr_throttled %d", s, lastNr)
		}
		lastNr = s.NrThrottled
		// The next record of the group carries the same period_seq.
		for _, r := range sink.stats[i+1:] {
			if !r.MidPeriod {
				if r.PeriodSeq != s.PeriodSeq {
					t.Errorf("event for period %d, next record is period %d", s.PeriodSeq, r.PeriodSeq)
				}
				if !r.Throttled {
					t.Errorf("record %v after a throttle event is not throttled", r)
				}
				break
			}
		}
	}
	// ~25 rises in 0.9 s, ~17 records at 50 ms; polls may miss none.
	if events < 15 || records < 10 || uint64(events) > nr.Load() {
		t.Fatalf("%d events for %d rises, %d records", events, nr.Load(), records)
	}
}

// On the real kernel (cgroup v1, root): a spinner capped at 5 ms per 100
// ms raises nr_throttled once per CFS period; the watcher reports each rise
// once, and nothing for an idle group with the same quota.
// watchSpinner runs the watcher for 1.5 s over two real v1 groups capped at
// 5 ms per 100 ms: handle 1 with a spinner in it, handle 2 idle. It returns
// what the sink got and the busy group's cpu.stat before and after.
func watchSpinner(t *testing.T, name string, near float64) (sink *recSink, before, after string) {
	t.Helper()
	busy := cgtest.New(t, name+"-busy")
	idle := cgtest.New(t, name+"-idle")
	spin := cgtest.Workload(t, "spin")
	for _, rel := range []string{busy, idle} {
		cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
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
	src.ThrottleNear = near
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
	sink = &recSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	before = cgtest.Read(t, "cpu", busy, "cpu.stat")
	if err := src.Run(ctx, sink); err != nil {
		t.Fatal(err)
	}
	return sink, before, cgtest.Read(t, "cpu", busy, "cpu.stat")
}

func TestThrottleWatcherRealCgroup(t *testing.T) {
	// nr_throttled rises only; TestNearThrottleRealCgroup covers the rest.
	sink, _, after := watchSpinner(t, "thr", 0)
	final, ok := cgroups.KeyedValue([]byte(after), "nr_throttled")
	if !ok {
		t.Fatal("no nr_throttled in cpu.stat")
	}
	var events int
	var first, last uint64
	for _, s := range sink.stats {
		if !s.MidPeriod {
			continue
		}
		if s.Handle != 1 {
			t.Errorf("event for the idle group: %v", s)
			continue
		}
		if events > 0 && s.NrThrottled <= last {
			t.Errorf("nr_throttled %d reported twice or backwards (after %d)", s.NrThrottled, last)
		}
		if events == 0 {
			first = s.NrThrottled
		}
		last = s.NrThrottled
		events++
	}
	// One rise per CFS period: ~14 in 1.4 s after the baseline; each seen
	// once (a loaded host may merge two into one poll, never split one).
	if events < 8 || uint64(events) > last-first+1 || last > final {
		t.Fatalf("%d events, nr_throttled %d..%d (now %d)", events, first, last, final)
	}
}

// On the real kernel: with near-throttle detection a spinner capped at
// 5 ms per 100 ms is reported once per CFS period, while it runs (before
// the period timer fires: its nr_throttled rise for that period is then
// not reported again), and an idle group never.
func TestNearThrottleRealCgroup(t *testing.T) {
	sink, b, a := watchSpinner(t, "near", DefaultThrottleNear)
	before, _ := cgroups.KeyedValue([]byte(b), "nr_periods")
	after, _ := cgroups.KeyedValue([]byte(a), "nr_periods")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var events int
	for _, s := range sink.stats {
		if !s.MidPeriod {
			continue
		}
		if s.Handle != 1 {
			t.Errorf("event for the idle group: %v", s)
			continue
		}
		events++
	}
	// At most one event per CFS period (near, or the rise when a loaded
	// host polled too late to see it coming), and most periods have one.
	periods := int(after - before)
	if events > periods+1 || events < periods/2 {
		t.Fatalf("%d events over %d CFS periods", events, periods)
	}
}

// Near-throttle detection on fake files: one event when 95 % of the quota
// is used within the CFS period, none again in that period nor for its
// nr_throttled rise, a fresh start after nr_periods moves or the quota is
// rewritten.
func TestNearThrottleOnePerCFSPeriod(t *testing.T) {
	f := newFakeGroup(t)
	quota := int64(20000)
	c := &Source{Limits: func(uint32) (int64, uint32) { return quota, 100000 }, groups: map[uint32]*sampled{},
		ThrottlePoll: 2 * time.Millisecond, ThrottleNear: 0.95, NoParentShortcut: true}
	s := &sampled{h: 3, g: f.g, seq: 7}
	c.groups[3] = s
	parents := c.regroup(map[string]*parentGroup{}, nil)
	buf := make([]byte, 512)
	usedUs := uint64(0)
	var got []string
	poll := func(what string, addUs, periods, throttled uint64) {
		usedUs += addUs
		f.write(t, "cpuacct.usage", fmt.Sprintf("%020d", usedUs*1000))
		f.write(t, "cpu.stat", fmt.Sprintf("nr_periods %012d\nnr_throttled %012d\nthrottled_time %015d", periods, throttled, 0))
		if evs := c.pollThrottle(parents, nil, buf); len(evs) > 0 {
			got = append(got, what)
		}
	}
	poll("baseline", 0, 1, 0)
	poll("half", 10000, 1, 0)
	poll("95%", 9000, 1, 0) // 19000 of 20000: event
	poll("more", 1000, 1, 0)
	poll("boundary, rise", 0, 2, 1) // the period ended throttled: already reported
	poll("new period", 5000, 2, 1)
	quota = 40000
	poll("rewrite", 30000, 2, 1) // the write refilled: 30000 of 40000
	poll("near again", 9000, 2, 1)
	poll("boundary, rise", 0, 3, 2) // reported while it came near
	poll("quiet", 1000, 3, 2)
	poll("boundary, unseen rise", 0, 4, 3) // throttled without a poll seeing it come: reported now
	want := []string{"95%", "near again", "boundary, unseen rise"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events at %v, want %v", got, want)
	}
}
