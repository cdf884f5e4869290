package cgroupfs

import (
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/rescue"
)

// cgroup v1: a group that grows past HighMargin below its limit is
// reported while it still runs (never under_oom), and after a raise the
// threshold follows the new limit: only growth past that asks again.
func TestV1ThresholdAsksBeforeTheLimit(t *testing.T) {
	const mib = 1 << 20
	rel := cgtest.New(t, "oom-threshold")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", "67108864") // 64 MiB
	// Margin room either side for the hogs' own few MiB.
	w, events := watchOne(t, cgtest.Open(t, rel), 16*mib)
	underOOM := func() bool {
		return strings.Contains(cgtest.Read(t, "memory", rel, "memory.oom_control"), "under_oom 1")
	}
	next := func(what string) rescue.Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no event (usage %s)", what, cgtest.Read(t, "memory", rel, "memory.usage_in_bytes"))
		}
		return rescue.Event{}
	}

	// 52 MiB: past the threshold at 48 MiB, below the 64 MiB limit.
	first, err := cgtest.Start(rel, hog, "-mib", "52", "-step-mib", "1", "-hold", "60s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Kill)
	e := next("growth past the threshold")
	if e.Handle != 1 || e.Limit != 64*mib || e.Usage < 48*mib || e.Usage >= 64*mib {
		t.Fatalf("event %+v: want usage in [48, 64) MiB under a 64 MiB limit", e)
	}
	if underOOM() {
		t.Fatal("the group waited at its limit although it was reported below it")
	}

	// The grant: 128 MiB. The threshold moves to 112 MiB; the hog that
	// holds its 52 MiB asks nothing more.
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", "134217728")
	if err := w.Follow(1, 128*mib); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		at := w.byH[1].tAt
		w.mu.Unlock()
		if at == 112*mib {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threshold at %d, want 112 MiB after the raise", at)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("event %+v with usage far below the moved threshold", e)
	case <-time.After(300 * time.Millisecond):
	}
	// 64 MiB more: about 120 MiB in all, past 112.
	second, err := cgtest.Start(rel, hog, "-mib", "64", "-step-mib", "1", "-hold", "60s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Kill)
	if e := next("growth past the moved threshold"); e.Limit != 128*mib || e.Usage < 112*mib {
		t.Fatalf("event %+v: want usage >= 112 MiB under a 128 MiB limit", e)
	}
	if underOOM() {
		t.Fatal("the group waited at its raised limit")
	}
}

// watchOne watches g as handle 1 with a Watcher of its own (margin 0:
// the default HighMargin) and returns the channel its events arrive on.
// The Watcher is closed when the test ends, which also restores the trap.
func watchOne(t *testing.T, g *cgroups.Group, margin int64) (*Watcher, chan rescue.Event) {
	t.Helper()
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if margin > 0 {
		w.HighMargin = margin
	}
	events := make(chan rescue.Event, 16)
	go w.Run(func(e rescue.Event) { events <- e })
	if err := w.Add(1, g); err != nil {
		t.Fatal(err)
	}
	return w, events
}
