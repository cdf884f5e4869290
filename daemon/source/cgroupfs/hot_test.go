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
)

// Only a group whose last period came near its quota is polled between
// period samples: an idle group with the same quota is never read by the
// watcher, and once the busy one goes quiet its polls stop too.
func TestThrottlePollOnlyNearQuota(t *testing.T) {
	busy, idle := newFakeGroup(t), newFakeGroup(t)
	c := &Source{Period: 50 * time.Millisecond, ThrottlePoll: 2 * time.Millisecond, ThrottleHot: DefaultThrottleHot,
		Limits: func(uint32) (int64, uint32) { return 20000, 100000 }, groups: map[uint32]*sampled{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	bs, is := &sampled{h: 1, g: busy.g}, &sampled{h: 2, g: idle.g}
	c.groups[1], c.groups[2] = bs, is
	c.dirty = true
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var running atomic.Bool
	running.Store(true)
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		// 1 ms of CPU per 5 ms: 10 ms per 50 ms sampling period, the
		// whole quota (20 ms per 100 ms).
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var usage uint64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if running.Load() {
				usage += 1_000_000
				busy.write(t, "cpuacct.usage", fmt.Sprintf("%020d", usage))
			}
		}
	}()
	var atStopA, wakesAtStopA atomic.Int64
	go func() {
		time.Sleep(600 * time.Millisecond)
		running.Store(false)
		time.Sleep(200 * time.Millisecond) // two period records of no usage
		c.mu.Lock()
		atStopA.Store(int64(bs.pollReads))
		c.mu.Unlock()
		wakesAtStopA.Store(c.pollWakes.Load())
	}()
	if err := c.sampleLoop(ctx, &recSink{}); err != nil {
		t.Fatal(err)
	}
	<-writer
	atStop, wakesAtStop := atStopA.Load(), wakesAtStopA.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if is.pollReads != 0 {
		t.Errorf("idle group polled %d times", is.pollReads)
	}
	// ~500 ms hot at one poll per 2 ms; a loaded host polls less often.
	if atStop < 20 {
		t.Errorf("busy group polled %d times while near its quota", atStop)
	}
	if n := int64(bs.pollReads) - atStop; n != 0 {
		t.Errorf("busy group polled %d times after it went quiet", n)
	}
	if n := c.pollWakes.Load() - wakesAtStop; n != 0 {
		t.Errorf("poll timer woke %d times with no group near its quota", n)
	}
}

// A host of idle groups with quotas never wakes for throttle polls, the
// warm-up check included (their parent is idle).
func TestThrottlePollTimerOffWhenAllIdle(t *testing.T) {
	c := &Source{Period: 20 * time.Millisecond, ThrottlePoll: time.Millisecond, ThrottleHot: DefaultThrottleHot, ThrottleWarm: 5 * time.Millisecond,
		Limits: func(uint32) (int64, uint32) { return 20000, 100000 }, groups: map[uint32]*sampled{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	parent := t.TempDir() // its cpuacct.usage never moves
	if err := os.WriteFile(filepath.Join(parent, "cpuacct.usage"), []byte(fmt.Sprintf("%020d\n", 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	for h := uint32(1); h <= 3; h++ {
		c.groups[h] = &sampled{h: h, g: newFakeGroupIn(t, parent, fmt.Sprint(h)).g}
	}
	c.dirty = true
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var settled atomic.Int64
	go func() {
		// After two periods every group has a baseline and the parent is
		// known idle (the first period's polls are allowed).
		time.Sleep(60 * time.Millisecond)
		settled.Store(c.pollWakes.Load())
	}()
	if err := c.sampleLoop(ctx, &recSink{}); err != nil {
		t.Fatal(err)
	}
	if n := c.pollWakes.Load() - settled.Load(); n != 0 {
		t.Fatalf("%d throttle polls for idle groups", n)
	}
	// With the hot gate off (every group with a quota), the same host
	// polls: the test above would pass for a timer that never runs.
	c.ThrottleHot, c.dirty = 0, true
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := c.sampleLoop(ctx2, &recSink{}); err != nil {
		t.Fatal(err)
	}
	if c.pollWakes.Load() == 0 {
		t.Fatal("no throttle polls with the hot gate off")
	}
}

// newFakeGroupIn is newFakeGroup under parent (several groups may share
// one, as containers share /docker).
func newFakeGroupIn(t *testing.T, parent, name string) *fakeGroup {
	t.Helper()
	dir := filepath.Join(parent, name)
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

// A group that jumps from idle into its quota is watched within the
// period, before its period record says so, when its parent is awake (a
// sibling ran a little the period before): the poll checks each awake
// parent's usage every ThrottleWarm, finds the one that moved and makes
// its busy member hot. A group under a parent idle the whole period is
// never read between periods.
func TestThrottleWarmCatchesABurstFromIdle(t *testing.T) {
	shared, alone := t.TempDir(), t.TempDir()
	busy, sibling := newFakeGroupIn(t, shared, "busy"), newFakeGroupIn(t, shared, "sibling")
	idle := newFakeGroupIn(t, alone, "idle")
	parentUsage := map[string]string{shared: filepath.Join(shared, "cpuacct.usage"), alone: filepath.Join(alone, "cpuacct.usage")}
	for _, f := range parentUsage {
		if err := os.WriteFile(f, []byte(fmt.Sprintf("%020d\n", 0)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setUsage := func(f *fakeGroup, file string, ns int64) {
		u := fmt.Sprintf("%020d", ns)
		if f != nil {
			f.write(t, "cpuacct.usage", u)
		}
		w, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.WriteAt([]byte(u+"\n"), 0)
			w.Close()
		}
		if err != nil {
			t.Error(err)
		}
	}
	const period = 100 * time.Millisecond
	c := &Source{Period: period, ThrottlePoll: 2 * time.Millisecond, ThrottleWarm: 5 * time.Millisecond,
		ThrottleHot: DefaultThrottleHot, ThrottleNear: DefaultThrottleNear,
		Limits: func(uint32) (int64, uint32) { return 20000, 100000 }, groups: map[uint32]*sampled{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	bs, ss, is := &sampled{h: 1, g: busy.g}, &sampled{h: 3, g: sibling.g}, &sampled{h: 2, g: idle.g}
	c.groups[1], c.groups[2], c.groups[3] = bs, is, ss
	c.dirty = true
	// The burst starts 10 ms after the fourth period tick (the sampler's
	// ticks are on the wall clock's multiples of the period): its next
	// period record is 90 ms away. The sibling runs 1 ms in the period
	// before, far below its quota.
	now := time.Now()
	burstAt := now.Truncate(period).Add(4*period + 10*time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), burstAt.Add(period+50*time.Millisecond))
	defer cancel()
	sink := &recSink{}
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		time.Sleep(time.Until(burstAt.Add(-period + 20*time.Millisecond)))
		sibling.write(t, "cpuacct.usage", fmt.Sprintf("%020d", time.Millisecond.Nanoseconds()))
		setUsage(nil, parentUsage[shared], time.Millisecond.Nanoseconds())
		time.Sleep(time.Until(burstAt))
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A full core: as much CPU as wall time since the burst began.
			d := time.Since(start).Nanoseconds()
			busy.write(t, "cpuacct.usage", fmt.Sprintf("%020d", d))
			setUsage(nil, parentUsage[shared], d+time.Millisecond.Nanoseconds())
		}
	}()
	if err := c.sampleLoop(ctx, sink); err != nil {
		t.Fatal(err)
	}
	<-writer
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var event, record time.Duration = -1, -1
	for i, s := range sink.stats {
		if s.Handle != 1 {
			continue
		}
		at := sink.at[i].Sub(burstAt)
		if s.MidPeriod && event < 0 {
			event = at
		}
		if !s.MidPeriod && s.UsageUs > 0 && record < 0 {
			record = at
		}
	}
	if event < 0 || record >= 0 && event > record {
		t.Fatalf("first throttle event %v after the burst, first period record %v: the burst was not watched within its period", event, record)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if is.pollReads != 0 || is.warmReads != 0 {
		t.Errorf("group under an idle parent read %d times by the poll, %d by the warm-up check", is.pollReads, is.warmReads)
	}
	t.Logf("burst from idle: throttle event %v after it began (period record at %v)", event, record)
}
