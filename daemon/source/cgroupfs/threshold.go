package cgroupfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
)

// cgroup v1 asks early. At the limit itself only a page fault waits for
// the verdict (oom_kill_disable); a charge made inside a system call fails
// with ENOMEM instead, and a Go runtime that maps a new heap arena while
// its faulting thread waits (the VMA is charged to the group) dies of it.
// So a usage threshold (cgroup.event_control on memory.usage_in_bytes)
// sits HighMargin below the limit, and crossing it asks for memory while
// the tasks still run, as the v2 brake does. The threshold follows the
// limit off the rescue's path: each registration waits for an RCU grace
// period in the kernel (milliseconds; in line it put the rescue p50
// through the controller at 15 ms).

// thresholdAt is where a v1 group's usage threshold sits for limit max:
// margin below it (0: none, for an unlimited or tiny limit), the v2
// brake's rule (SetHigh).
func thresholdAt(max, margin int64) int64 {
	if max == cgroups.Max || max <= 2*margin {
		return 0
	}
	return max - margin
}

// addThresholdV1 registers an eventfd the kernel signals when g's usage
// crosses at, either way. The kernel keeps its own reference to the usage
// file, so ours is closed at once.
func addThresholdV1(g *cgroups.Group, at int64) (int, error) {
	if g.Paths.Memory == "" {
		return -1, errors.New("oom: no memory cgroup")
	}
	uf, err := unix.Open(filepath.Join(g.Paths.Memory, "memory.usage_in_bytes"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("oom: %w", err)
	}
	defer unix.Close(uf)
	cfd, err := unix.Open(filepath.Join(g.Paths.Memory, "cgroup.event_control"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("oom: %w", err)
	}
	defer unix.Close(cfd)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("oom: eventfd: %w", err)
	}
	if _, err := unix.Write(cfd, fmt.Appendf(nil, "%d %d %d", efd, uf, at)); err != nil {
		unix.Close(efd)
		return -1, fmt.Errorf("oom: register usage threshold: %w", err)
	}
	return efd, nil
}

// wantThresholdLocked records where wt's threshold belongs for limit max
// and wakes the mover; w.mu is held.
func (w *Watcher) wantThresholdLocked(wt *watch, max int64) {
	if at := thresholdAt(max, w.HighMargin); at != wt.tWant {
		wt.tWant = at
		select {
		case w.moves <- struct{}{}:
		default:
		}
	}
}

// moveThresholds registers the thresholds the limits asked for until done
// is closed. The kernel signals only a crossing, so a group already past
// its new threshold (it grew while the registration waited) is reported
// here.
func (w *Watcher) moveThresholds(fn func(rescue.Event), done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-w.moves:
		}
		for {
			w.mu.Lock()
			var wt *watch
			for _, x := range w.byH {
				if x.tWant != x.tAt {
					wt = x
					break
				}
			}
			if wt == nil {
				w.mu.Unlock()
				break
			}
			at := wt.tWant
			w.mu.Unlock()
			fd, err := -1, error(nil)
			if at > 0 {
				fd, err = addThresholdV1(wt.g, at)
			}
			w.mu.Lock()
			if w.byH[wt.h] != wt { // removed meanwhile
				w.mu.Unlock()
				if fd >= 0 {
					unix.Close(fd)
				}
				continue
			}
			w.dropThresholdLocked(wt)
			wt.tAt = at // also after a failure: the trap at the limit still holds
			if err == nil && fd >= 0 {
				if unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}) == nil {
					wt.tfd = fd
					w.byFD[fd] = wt
				} else {
					unix.Close(fd)
				}
			}
			armed := wt.tfd >= 0
			w.mu.Unlock()
			if armed {
				if e, ok := w.checkThreshold(wt, at); ok {
					e.At = time.Now()
					fn(e)
				}
			}
		}
	}
}

// dropThresholdLocked closes wt's usage threshold; w.mu is held.
func (w *Watcher) dropThresholdLocked(wt *watch) {
	if wt.tfd >= 0 {
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, wt.tfd, nil)
		unix.Close(wt.tfd)
		delete(w.byFD, wt.tfd)
	}
	wt.tfd, wt.tAt = -1, 0
}

// checkThreshold confirms a threshold wake-up is a rise past at of a group
// whose trap is set (after a denial there is nothing more to ask for).
func (w *Watcher) checkThreshold(wt *watch, at int64) (rescue.Event, bool) {
	e := rescue.Event{Handle: wt.h}
	wt.mu.Lock()
	released := wt.released
	wt.mu.Unlock()
	u, err := wt.g.ReadInt(cgroups.MemUsage)
	if released || err != nil || u < at {
		return e, false
	}
	e.Usage = uint64(u)
	e.Limit, _ = wt.g.ReadInt(cgroups.MemLimit)
	return e, true
}
