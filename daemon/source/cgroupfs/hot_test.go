package cgroupfs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
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
	var atStop, wakesAtStop int64
	go func() {
		time.Sleep(600 * time.Millisecond)
		running.Store(false)
		time.Sleep(200 * time.Millisecond) // two period records of no usage
		c.mu.Lock()
		atStop = int64(bs.pollReads)
		c.mu.Unlock()
		wakesAtStop = c.pollWakes.Load()
	}()
	if err := c.sampleLoop(ctx, &recSink{}); err != nil {
		t.Fatal(err)
	}
	<-writer
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

// A host of idle groups with quotas never wakes for throttle polls.
func TestThrottlePollTimerOffWhenAllIdle(t *testing.T) {
	c := &Source{Period: 20 * time.Millisecond, ThrottlePoll: time.Millisecond, ThrottleHot: DefaultThrottleHot,
		Limits: func(uint32) (int64, uint32) { return 20000, 100000 }, groups: map[uint32]*sampled{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for h := uint32(1); h <= 3; h++ {
		c.groups[h] = &sampled{h: h, g: newFakeGroup(t).g}
	}
	c.dirty = true
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.sampleLoop(ctx, &recSink{}); err != nil {
		t.Fatal(err)
	}
	if n := c.pollWakes.Load(); n != 0 {
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
