package cgroupfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
)

type watch struct {
	h  uint32
	g  *cgroups.Group
	fd int // eventfd (v1) or our own memory.events descriptor (v2)
	// v1 usage threshold (threshold.go), under the Watcher's mu: its
	// eventfd (-1: none), where it sits and where it should.
	tfd        int
	tAt, tWant int64

	mu       sync.Mutex // v2 state below: Run's goroutine and the agent's
	high     uint64     // v2: last seen "high" count
	kills    uint64     // v2: last seen "oom_kill" count
	released bool       // trap off after a denial or a missed deadline (v1: oom_kill_disable 0; v2: brake off)
}

// Watcher multiplexes every watched group on one epoll descriptor.
type Watcher struct {
	// HighMargin is the v2 gap between memory.high and memory.max, and
	// the v1 gap between the usage threshold and the limit.
	HighMargin int64

	epfd  int
	wake  int           // eventfd to stop Run
	moves chan struct{} // a v1 threshold to move (threshold.go)
	mu    sync.Mutex
	byFD  map[int]*watch
	byH   map[uint32]*watch
}

// NewWatcher creates the epoll set.
func NewWatcher() (*Watcher, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("oom: epoll: %w", err)
	}
	wk, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("oom: eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wk, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wk)}); err != nil {
		unix.Close(ep)
		unix.Close(wk)
		return nil, err
	}
	return &Watcher{HighMargin: 8 << 20, epfd: ep, wake: wk, moves: make(chan struct{}, 1), byFD: map[int]*watch{}, byH: map[uint32]*watch{}}, nil
}

// Add starts watching h's group.
func (w *Watcher) Add(h uint32, g *cgroups.Group) error {
	var fd int
	var err error
	if g.Paths.Version == cgroups.V2 {
		fd, err = w.addV2(g)
	} else {
		// Listed (guard, state file) before the arming write: a crash in
		// between leaves it listed, and restoring it is harmless.
		currentGuard().Armed(oomControlPath(g))
		fd, err = addV1(g)
		if err != nil {
			// Not armed (a group being removed answers EINVAL): give the
			// kernel OOM killer back, best effort, and unlist the group so
			// no guard, restore or state file keeps a dead entry.
			_ = g.Write(cgroups.OOMControl, []byte("0"))
			currentGuard().Disarmed(oomControlPath(g))
		}
	}
	if err != nil {
		return err
	}
	wt := &watch{h: h, g: g, fd: fd, tfd: -1}
	if g.Paths.Version == cgroups.V2 {
		wt.high, wt.kills = readEvents(g)
	}
	w.mu.Lock()
	if old := w.byH[h]; old != nil {
		w.dropLocked(old, old.g.Paths.Memory != g.Paths.Memory)
	}
	w.byFD[fd], w.byH[h] = wt, wt
	if g.Paths.Version == cgroups.V1 {
		if max, err := g.ReadInt(cgroups.MemLimit); err == nil {
			w.wantThresholdLocked(wt, max)
		}
	}
	w.mu.Unlock()
	events := uint32(unix.EPOLLIN)
	if g.Paths.Version == cgroups.V2 {
		events = unix.EPOLLPRI // kernfs_notify: memory.events changed
	}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		w.Remove(h)
		return fmt.Errorf("oom: epoll add: %w", err)
	}
	return nil
}

// TrapFile is the file a trap on group p sets and a restore clears: v1
// memory.oom_control (oom_kill_disable), v2 memory.high (the brake).
func TrapFile(p cgroups.Paths) (string, bool) {
	switch {
	case p.Version == cgroups.V1 && p.Memory != "":
		return filepath.Join(p.Memory, "memory.oom_control"), true
	case p.Version == cgroups.V2 && p.Unified != "":
		return filepath.Join(p.Unified, "memory.high"), true
	}
	return "", false
}

// Remove stops watching h (the group may already be gone).
func (w *Watcher) Remove(h uint32) {
	w.mu.Lock()
	if wt := w.byH[h]; wt != nil {
		w.dropLocked(wt, true)
	}
	w.mu.Unlock()
}

// dropLocked stops watching wt; restore clears its oom_kill_disable (v1)
// or its brake (v2: nobody would release it).
func (w *Watcher) dropLocked(wt *watch, restore bool) {
	if restore && wt.g.Paths.Version == cgroups.V2 {
		_ = wt.g.WriteInt(cgroups.MemHigh, cgroups.Max)
		currentGuard().Disarmed(highPath(wt.g))
	}
	if restore && wt.g.Paths.Version == cgroups.V1 {
		// Nobody watches it any more: never leave its OOM killer off (the
		// write fails harmlessly when the group is gone).
		_ = wt.g.Write(cgroups.OOMControl, []byte("0"))
		currentGuard().Disarmed(oomControlPath(wt.g))
	}
	w.dropThresholdLocked(wt)
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, wt.fd, nil)
	unix.Close(wt.fd)
	delete(w.byFD, wt.fd)
	delete(w.byH, wt.h)
}

func (w *Watcher) get(h uint32) *watch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byH[h]
}

// Release lets the kernel OOM killer act on h again (a denial or a missed
// deadline). On v1 this also wakes the waiting tasks, which retry the
// charge and meet the killer. On v2 (the killer was never disabled) it
// releases the brake, memory.high = max: left on, the tasks would crawl
// on towards memory.max under ever longer penalty sleeps, hung in all but
// name.
func (w *Watcher) Release(h uint32) error {
	wt := w.get(h)
	if wt == nil {
		return errors.New("oom: not watched")
	}
	if wt.g.Paths.Version == cgroups.V2 {
		wt.mu.Lock()
		defer wt.mu.Unlock()
		wt.released = true
		return wt.g.WriteInt(cgroups.MemHigh, cgroups.Max)
	}
	// Still listed (guard, state file): Maintain sets it again, and
	// restoring a released group is harmless.
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.released = true
	return wt.g.Write(cgroups.OOMControl, []byte("0"))
}

// Granted re-arms h after its limit was raised (v2: memory.high follows
// the new memory.max; v1: nothing, oom_kill_disable stays set).
func (w *Watcher) Granted(h uint32, newMax int64) error { return w.Follow(h, newMax) }

// Follow sets h's v2 brake for memory.max = newMax after any limit write
// (a grant, the controller's SetLimits, a reclaim); it also ends a
// release. On v1 the usage threshold follows (threshold.go).
func (w *Watcher) Follow(h uint32, newMax int64) error {
	wt := w.get(h)
	if wt == nil {
		return nil
	}
	if wt.g.Paths.Version == cgroups.V1 {
		w.mu.Lock()
		if w.byH[h] == wt {
			w.wantThresholdLocked(wt, newMax)
		}
		w.mu.Unlock()
		return nil
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.released = false
	return SetHigh(wt.g, newMax, w.HighMargin)
}

// Maintain sets a released trap again: on v1 once the group has left the
// OOM state (under_oom 0: the kernel killed a task or it freed memory), on
// v2 once its usage is two margins below memory.max. The rescue's watchdog
// calls it every few seconds while no request of h is pending.
func (w *Watcher) Maintain(h uint32) {
	wt := w.get(h)
	if wt == nil {
		return
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if !wt.released {
		return
	}
	if wt.g.Paths.Version == cgroups.V1 {
		var buf [256]byte
		b, err := wt.g.Read(cgroups.OOMControl, buf[:])
		if err != nil {
			return // the group is gone
		}
		if v, ok := cgroups.KeyedValue(b, "under_oom"); !ok || v != 0 {
			return // the kernel is still resolving this OOM: let it
		}
		currentGuard().Armed(oomControlPath(wt.g)) // listed before the write
		if wt.g.Write(cgroups.OOMControl, []byte("1")) == nil {
			wt.released = false
		}
		return
	}
	max, err := wt.g.ReadInt(cgroups.MemLimit)
	if err != nil {
		return
	}
	if u, err := wt.g.ReadInt(cgroups.MemUsage); err != nil || max != cgroups.Max && u > max-2*w.HighMargin {
		return
	}
	w.rearmLocked(wt, max)
}

// Released reports whether h's v2 brake is off (tests, diagnostics).
func (w *Watcher) Released(h uint32) bool {
	wt := w.get(h)
	if wt == nil {
		return false
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	return wt.released
}

// RestoreAll clears oom_kill_disable (v1) and the memory.high brake (v2)
// everywhere (daemon shutdown), so no container is left waiting or
// throttled for a verdict that will not come.
func (w *Watcher) RestoreAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.byH {
		if wt.g.Paths.Version == cgroups.V1 {
			_ = wt.g.Write(cgroups.OOMControl, []byte("0"))
		} else {
			_ = wt.g.WriteInt(cgroups.MemHigh, cgroups.Max)
		}
	}
}

// Run delivers events to deliver until Close, one call at a time, from
// the watcher's goroutines; deliver must not block for long.
func (w *Watcher) Run(deliver func(rescue.Event)) error {
	evs := make([]unix.EpollEvent, 64)
	var buf [512]byte
	// fn is called from here and from the threshold mover, one at a time.
	var fnMu sync.Mutex
	fn := func(e rescue.Event) {
		fnMu.Lock()
		defer fnMu.Unlock()
		deliver(e)
	}
	moverDone := make(chan struct{})
	defer close(moverDone)
	go w.moveThresholds(fn, moverDone)
	for {
		n, err := unix.EpollWait(w.epfd, evs, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		now := time.Now()
		for _, ev := range evs[:n] {
			fd := int(ev.Fd)
			if fd == w.wake {
				unix.Close(w.epfd)
				unix.Close(w.wake)
				return nil
			}
			w.mu.Lock()
			wt := w.byFD[fd]
			threshold, at := wt != nil && fd == wt.tfd, int64(0)
			if threshold {
				at = wt.tAt
			}
			w.mu.Unlock()
			if wt == nil {
				continue
			}
			if threshold {
				_, _ = unix.Read(fd, buf[:]) // drain the eventfd counter
				if e, ok := w.checkThreshold(wt, at); ok {
					e.At = now
					fn(e)
				}
				continue
			}
			if wt.g.Paths.Version == cgroups.V2 {
				if _, err := unix.Pread(fd, buf[:], 0); err != nil { // re-arms the poll
					// The group was removed: kernfs then reports
					// EPOLLERR|EPOLLPRI on every poll. Stop polling it
					// (Remove closes it) instead of spinning.
					_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
					continue
				}
			} else {
				_, _ = unix.Read(fd, buf[:]) // drain the eventfd counter
			}
			e, ok := w.check(wt, buf[:])
			if ok {
				e.At = now
				fn(e)
			}
		}
	}
}

// check confirms a wake-up is a real OOM: the eventfd also fires when the
// cgroup is removed.
func (w *Watcher) check(wt *watch, buf []byte) (rescue.Event, bool) {
	e := rescue.Event{Handle: wt.h}
	if wt.g.Paths.Version == cgroups.V2 {
		b, err := wt.g.Read(cgroups.MemEvents, buf)
		if err != nil {
			return e, false
		}
		high, _ := cgroups.KeyedValue(b, "high")
		kills, _ := cgroups.KeyedValue(b, "oom_kill")
		wt.mu.Lock()
		newHigh, killed := high > wt.high, kills > wt.kills
		wt.high, wt.kills = high, kills
		if wt.released {
			// The kernel killed at memory.max: the pressure that met the
			// limit is gone, brake again for the next growth.
			if killed {
				if max, err := wt.g.ReadInt(cgroups.MemLimit); err == nil {
					w.rearmLocked(wt, max)
				}
			}
			wt.mu.Unlock()
			return e, false
		}
		wt.mu.Unlock()
		if !newHigh {
			return e, false
		}
	} else {
		b, err := wt.g.Read(cgroups.OOMControl, buf)
		if err != nil {
			return e, false
		}
		if v, ok := cgroups.KeyedValue(b, "under_oom"); !ok || v == 0 {
			return e, false
		}
	}
	u, err := wt.g.ReadInt(cgroups.MemUsage)
	if err == nil && u >= 0 {
		e.Usage = uint64(u)
	}
	if wt.g.Paths.Version == cgroups.V2 && err == nil {
		// The kernel counts "high" before it reclaims: if reclaim got the
		// group back under the brake (page cache it could drop), there is
		// nothing to ask for.
		if high, herr := wt.g.ReadInt(cgroups.MemHigh); herr == nil && high != cgroups.Max && u <= high {
			return e, false
		}
	}
	e.Limit, _ = wt.g.ReadInt(cgroups.MemLimit)
	// e.Pages stays 0: the kernel does not say what the charge wanted.
	return e, true
}

// Close stops Run and closes every descriptor.
func (w *Watcher) Close() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.wake, one[:])
	w.mu.Lock()
	for _, wt := range w.byH {
		w.dropLocked(wt, true)
	}
	w.mu.Unlock()
}
