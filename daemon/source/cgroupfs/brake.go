package cgroupfs

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
)

func highPath(g *cgroups.Group) string {
	return filepath.Join(g.Paths.Unified, "memory.high")
}

func (w *Watcher) addV2(g *cgroups.Group) (int, error) {
	max, err := g.ReadInt(cgroups.MemLimit)
	if err != nil {
		return -1, err
	}
	// A descriptor of our own: kernfs tracks "changed since last read" per
	// open file, and only Run reads this one.
	fd, err := unix.Open(filepath.Join(g.Paths.Unified, "memory.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("oom: open memory.events: %w", err)
	}
	var buf [512]byte
	_, _ = unix.Pread(fd, buf[:], 0) // arm: the next change signals
	// Listed (guard, state file) before the brake is set: if escrad dies,
	// memory.high goes back to max and nobody is left throttled.
	currentGuard().Armed(highPath(g))
	if err := SetHigh(g, max, w.HighMargin); err != nil {
		unix.Close(fd)
		currentGuard().Disarmed(highPath(g))
		return -1, err
	}
	return fd, nil
}

// SetHigh keeps v2 memory.high margin below max (max when unlimited or tiny).
func SetHigh(g *cgroups.Group, max, margin int64) error {
	high := cgroups.Max
	if max != cgroups.Max && max > 2*margin {
		high = max - margin
	}
	return g.WriteInt(cgroups.MemHigh, high)
}

// readEvents returns memory.events' "high" and "oom_kill" counts.
func readEvents(g *cgroups.Group) (high, kills uint64) {
	var buf [512]byte
	b, err := g.Read(cgroups.MemEvents, buf[:])
	if err != nil {
		return 0, 0
	}
	high, _ = cgroups.KeyedValue(b, "high")
	kills, _ = cgroups.KeyedValue(b, "oom_kill")
	return high, kills
}

// rearmLocked sets the brake below max; wt.mu is held.
func (w *Watcher) rearmLocked(wt *watch, max int64) {
	if SetHigh(wt.g, max, w.HighMargin) == nil {
		wt.released = false
	}
}
