package cgroupfs

import (
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
)

// cgroup v1: after a denial (Release) the kernel OOM killer takes the hog,
// the group lives on, and Maintain sets the trap again, so the next hog in
// the group waits for a verdict (under_oom) instead of being killed.
func TestV1TrapRearmedAfterRelease(t *testing.T) {
	rel := cgtest.New(t, "oom-rearm")
	hog := cgtest.Workload(t, "memhog")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", "33554432")
	w, events := watchOne(t, cgtest.Open(t, rel), 0)
	disabled := func() string {
		return strings.Fields(cgtest.Read(t, "memory", rel, "memory.oom_control"))[1]
	}
	trapOnce := func(n int) *cgtest.Proc {
		t.Helper()
		// Events the previous hog's OOM and kill left are not this hog's.
		for drained := false; !drained; {
			select {
			case <-events:
			default:
				drained = true
			}
		}
		p, err := cgtest.Start(rel, hog, "-mib", "64", "-hold", "60s")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		select {
		case <-events:
		case <-time.After(30 * time.Second):
			t.Fatalf("hog %d: no OOM event (oom_control %q)", n, cgtest.Read(t, "memory", rel, "memory.oom_control"))
		}
		return p
	}
	first := trapOnce(1)
	// The denial: the trap is released, the kernel kills the hog.
	if err := w.Release(1); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(30 * time.Second); err != nil {
		t.Fatalf("the released hog was not killed: %v", err)
	}
	if disabled() != "0" {
		t.Fatalf("oom_kill_disable %s after the release", disabled())
	}
	w.Maintain(1)
	if disabled() != "1" {
		t.Fatalf("oom_kill_disable %s after Maintain: the trap was not set again", disabled())
	}
	// The next hog is trapped again: it waits under_oom, alive.
	second := trapOnce(2)
	// The event can come a moment before the kernel marks the group
	// under_oom; a loaded host stretches that moment.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(cgtest.Read(t, "memory", rel, "memory.oom_control"), "under_oom 1"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("second hog not waiting: %q", cgtest.Read(t, "memory", rel, "memory.oom_control"))
		}
	}
	if _, err := second.Wait(200 * time.Millisecond); err == nil {
		t.Fatal("the second hog ended although the trap was re-armed")
	}
	w.Release(1) // end it the usual way
}
