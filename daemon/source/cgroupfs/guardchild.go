package cgroupfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/procstat"
)

// RunGuard is the guard's main: it returns after escrad's end closed and
// every armed group got oom_kill_disable 0. While escrad is stopped
// (SIGSTOP, a debugger) its verdict deadline cannot fire, so the guard
// also releases a v1 group it sees waiting at its limit on two checks in a
// row then (StoppedCheck apart): the kernel OOM killer acts, as after a
// missed deadline, and escrad's watchdog arms the trap again once it runs.
func RunGuard(in io.Reader) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var mu sync.Mutex
	armed := map[string]bool{}
	go watchStopped(os.Getppid(), StoppedCheck, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, 0, len(armed))
		for p := range armed {
			out = append(out, p)
		}
		return out
	})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		l := sc.Text()
		if len(l) < 2 {
			continue
		}
		mu.Lock()
		switch l[0] {
		case '+':
			armed[l[1:]] = true
		case '-':
			delete(armed, l[1:])
		}
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	for p := range armed {
		// The group may be gone with its container: nothing to clear then.
		if err := os.WriteFile(p, restoreValue(p), 0); err == nil {
			fmt.Fprintf(os.Stderr, "escrad oom guard: escrad gone, OOM killer re-enabled (v2: memory.high brake released): %s\n", p)
		}
	}
}

// StoppedCheck is how often the guard looks whether escrad is stopped: a
// waiting task is released within two checks of escrad's stop or of its
// OOM, whichever is later (under escrad's 200 ms deadline + a kill).
var StoppedCheck = 100 * time.Millisecond

// watchStopped releases the v1 groups whose tasks wait at their limit on
// two checks in a row while process pid is stopped.
func watchStopped(pid int, every time.Duration, armed func() []string) {
	waiting := map[string]bool{}
	for {
		time.Sleep(every)
		if !Stopped(pid) {
			clear(waiting)
			continue
		}
		now := map[string]bool{}
		for _, p := range armed() {
			if filepath.Base(p) != "memory.oom_control" || !UnderOOM(p) {
				continue
			}
			if waiting[p] {
				if err := os.WriteFile(p, []byte("0"), 0); err == nil {
					fmt.Fprintf(os.Stderr, "escrad oom guard: escrad stopped, a task waits at its limit: OOM killer re-enabled: %s\n", p)
				}
				continue
			}
			now[p] = true
		}
		waiting = now
	}
}

// Stopped reports whether process pid is stopped (state T or t).
func Stopped(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && st.Stopped()
}
