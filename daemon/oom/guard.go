package oom

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// GuardArg is the hidden first argument that makes escrad run as its own
// OOM guard (see StartGuard).
const GuardArg = "__escrad-oom-guard"

// Guard is the daemon's end of the OOM guard: a small child process that
// outlives escrad. v1 trapping disables a group's OOM killer; if escrad
// died without clearing it (SIGKILL, a crash), a task at its limit would
// wait for a verdict that never comes. The guard learns every armed
// memory.oom_control over a pipe and, when the pipe closes (escrad gone,
// however it died), writes oom_kill_disable 0 to each: the kernel OOM
// killer is back before anyone can notice escrad is missing.
type Guard struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// StartGuard starts exe GuardArg as the guard. The guard ignores SIGINT and
// SIGTERM (a service stop signals the whole group; escrad clears its groups
// itself then) and leaves when escrad's end of the pipe closes.
func StartGuard(exe string) (*Guard, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, GuardArg)
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("oom guard: %w", err)
	}
	r.Close()
	go cmd.Wait()
	return &Guard{w: w, cmd: cmd}, nil
}

// Pid is the guard's process id.
func (g *Guard) Pid() int { return g.cmd.Process.Pid }

func (g *Guard) send(op byte, path string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	fmt.Fprintf(g.w, "%c%s\n", op, path) // a dead guard: nothing better to do
}

// Armed tells the guard a group's OOM killer is disabled (path is its
// memory.oom_control).
func (g *Guard) Armed(path string) { g.send('+', path) }

// Disarmed tells the guard the group needs no clearing any more.
func (g *Guard) Disarmed(path string) { g.send('-', path) }

// Close ends the guard after a clean shutdown (it clears what is left).
func (g *Guard) Close() error { return g.w.Close() }

// RunGuard is the guard's main: it returns after escrad's end closed and
// every armed group got oom_kill_disable 0.
func RunGuard(in io.Reader) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	armed := map[string]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		l := sc.Text()
		if len(l) < 2 {
			continue
		}
		switch l[0] {
		case '+':
			armed[l[1:]] = true
		case '-':
			delete(armed, l[1:])
		}
	}
	for p := range armed {
		// The group may be gone with its container: nothing to clear then.
		if err := os.WriteFile(p, []byte("0"), 0); err == nil {
			fmt.Fprintf(os.Stderr, "escrad oom guard: escrad gone, OOM killer re-enabled: %s\n", p)
		}
	}
}

var (
	guardMu sync.Mutex
	guard   *Guard
)

// SetGuard makes every Watcher report armed groups to g (escrad's main
// sets it once before the agent starts; nil: no guard).
func SetGuard(g *Guard) {
	guardMu.Lock()
	guard = g
	guardMu.Unlock()
}

func currentGuard() *Guard {
	guardMu.Lock()
	defer guardMu.Unlock()
	return guard
}
