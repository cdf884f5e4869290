package main

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinClients puts this process (and so wrk, its child) on CPU 0: under
// WYSIWYG escrad gives the C1 container the highest-numbered core, so
// the client does not run on it in either case. Affinity is per thread
// and Go forks wrk from whichever thread runs the goroutine, so every
// thread is pinned (pinning only the calling one left wrk on 0-1 in most
// runs, next to the WYSIWYG nginx on core 1). Threads made later inherit
// the affinity of a pinned one; a second pass catches any made meanwhile.
func pinClients() error {
	var set unix.CPUSet
	set.Set(0)
	for pass := 0; pass < 3; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		changed := false
		for _, ent := range ents {
			tid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return nil
}
