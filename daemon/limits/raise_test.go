package limits

import (
	"strconv"
	"testing"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
)

// On a real group: a raise only goes up, and a raise to unlimited (a
// container whose user set no memory limit, answered on the host during
// a controller outage) lifts the limit and is what the entry reports.
func TestRaiseMemoryUpOnlyAndToUnlimited(t *testing.T) {
	rel := cgtest.New(t, "raise")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(64<<20))
	e, err := NewEntry("x", false, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	if got, err := a.RaiseMemory(1, 32<<20); err != nil || got != 64<<20 {
		t.Fatalf("lower raise: %d, %v; want the limit kept at 64 MiB", got, err)
	}
	if got, err := a.RaiseMemory(1, cgroups.Max); err != nil || got != cgroups.Max {
		t.Fatalf("raise to unlimited: %d, %v", got, err)
	}
	if cur, _ := e.Current(); cur.MemoryBytes != cgroups.Max {
		t.Fatalf("entry reports %d, want unlimited", cur.MemoryBytes)
	}
	if v, err := cgtest.Open(t, rel).ReadInt(cgroups.MemLimit); err != nil || v != cgroups.Max {
		t.Fatalf("memory limit in the group %d, %v; want unlimited", v, err)
	}
}

// On a real group: a raise from memory credit gets the limit in place,
// writes what it returns when that is higher, and reports both; lower
// answers write nothing.
func TestRaiseMemoryFromCurrentLimit(t *testing.T) {
	rel := cgtest.New(t, "raisefrom")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(64<<20))
	e, err := NewEntry("x", false, cgtest.Open(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	a := New()
	a.Add(1, e)
	var seen int64
	before, now, err := a.RaiseMemoryFrom(1, func(cur int64) int64 { seen = cur; return cur + 16<<20 })
	if err != nil || seen != 64<<20 || before != 64<<20 || now != 80<<20 {
		t.Fatalf("raise from %d: before %d, now %d, %v; want 64 → 80 MiB", seen, before, now, err)
	}
	if v, err := cgtest.Open(t, rel).ReadInt(cgroups.MemLimit); err != nil || v != 80<<20 {
		t.Fatalf("memory limit in the group %d, %v; want 80 MiB", v, err)
	}
	if _, now, err := a.RaiseMemoryFrom(1, func(cur int64) int64 { return cur - 4096 }); err != nil || now != 80<<20 {
		t.Fatalf("a lower answer: now %d, %v; want the limit kept", now, err)
	}
	if _, _, err := a.RaiseMemoryFrom(2, func(int64) int64 { return 1 << 30 }); err != ErrUnknown {
		t.Fatalf("unknown handle: %v", err)
	}
}
