package cgroupfs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"
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
//
// A guard that dies alone (killed by hand, the host's OOM killer picking
// it) is started again, at most once a second, and told the armed set:
// escrad is never left running without one.
//
// The guard dies with escrad when both are killed together (SIGKILL to
// the unit's cgroup, the host's OOM killer): for that, every armed path is
// also listed in a state file (RecordIn), written before the group is
// armed, so RestoreRecorded (escrad restore-oom, and escrad's own start)
// can clear them afterwards.
type Guard struct {
	mu     sync.Mutex
	exe    string   // what StartGuard ran; "": no guard process (NewRecorder)
	w      *os.File // pipe to the guard process; nil: none
	cmd    *exec.Cmd
	closed bool
	state  string // state file; "": none
	armed  map[string]bool
	// stateErr sees a failed state-file write; restarted each replacement
	// of a guard that died alone (see Report).
	stateErr  func(error)
	restarted func(oldPid, newPid int, err error)
}

// Report sets who hears of failed state-file writes and of guard restarts
// (the old pid, the new one, or 0 and the error when it could not start).
// escrad logs both.
func (g *Guard) Report(stateErr func(error), restarted func(oldPid, newPid int, err error)) {
	g.mu.Lock()
	g.stateErr, g.restarted = stateErr, restarted
	g.mu.Unlock()
}

// guardRestartEvery spaces restarts: a guard that cannot live (its binary
// replaced by an upgrade, say) must not make escrad spin.
const guardRestartEvery = time.Second

// StartGuard starts exe GuardArg as the guard. The guard ignores SIGINT and
// SIGTERM (a service stop signals the whole group; escrad clears its groups
// itself then) and leaves when escrad's end of the pipe closes.
func StartGuard(exe string) (*Guard, error) {
	g := &Guard{exe: exe, armed: map[string]bool{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.spawnLocked(); err != nil {
		return nil, err
	}
	return g, nil
}

// spawnLocked starts a guard process, tells it the armed set and watches
// it (g.mu held).
func (g *Guard) spawnLocked() error {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return fmt.Errorf("oom guard: %w", err)
	}
	cmd := exec.Command(g.exe, GuardArg)
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("oom guard: %w", err)
	}
	r.Close()
	for p := range g.armed {
		fmt.Fprintf(w, "+%s\n", p)
	}
	g.w, g.cmd = w, cmd
	go g.watch(cmd, time.Now())
	return nil
}

// watch reaps a guard process and, unless escrad closed the guard,
// replaces it.
func (g *Guard) watch(cmd *exec.Cmd, started time.Time) {
	_ = cmd.Wait()
	if d := guardRestartEvery - time.Since(started); d > 0 {
		time.Sleep(d)
	}
	for {
		g.mu.Lock()
		if g.closed || g.cmd != cmd {
			g.mu.Unlock()
			return
		}
		g.w.Close()
		g.w = nil
		err := g.spawnLocked()
		newPid := 0
		if err == nil {
			newPid = g.cmd.Process.Pid
		}
		report := g.restarted
		g.mu.Unlock()
		if report != nil {
			report(cmd.Process.Pid, newPid, err)
		}
		if err == nil {
			return
		}
		time.Sleep(guardRestartEvery)
	}
}

// NewRecorder is a Guard without a process: it only keeps the state file
// (escrad --no-oom-guard).
func NewRecorder() *Guard { return &Guard{armed: map[string]bool{}} }

// Pid is the guard's process id (0: no guard process).
func (g *Guard) Pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil || g.w == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// RecordIn keeps the armed set in the state file path from now on (its
// directory is created; the file is rewritten with the current set).
func (g *Guard) RecordIn(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("oom state: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = path
	return g.writeStateLocked()
}

// writeStateLocked replaces the state file with the armed set (write to a
// temporary file, rename: a crash leaves the old or the new list, never half).
func (g *Guard) writeStateLocked() error {
	if g.state == "" {
		return nil
	}
	ps := make([]string, 0, len(g.armed))
	for p := range g.armed {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	var b bytes.Buffer
	b.WriteString("# escrad: memory.oom_control files with oom_kill_disable set (escrad restore-oom clears them)\n")
	for _, p := range ps {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	tmp := g.state + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("oom state: %w", err)
	}
	if err := os.Rename(tmp, g.state); err != nil {
		return fmt.Errorf("oom state: %w", err)
	}
	return nil
}

func (g *Guard) send(op byte, path string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if op == '+' {
		g.armed[path] = true
	} else {
		delete(g.armed, path)
	}
	if err := g.writeStateLocked(); err != nil && g.stateErr != nil {
		g.stateErr(err)
	}
	if g.w != nil {
		fmt.Fprintf(g.w, "%c%s\n", op, path) // a dead guard: nothing better to do
	}
}

// Armed tells the guard a group's OOM killer is (about to be) disabled
// (path is its memory.oom_control). Called before the arming write, so a
// crash in between leaves the path listed: restoring it is harmless.
func (g *Guard) Armed(path string) { g.send('+', path) }

// Disarmed tells the guard the group needs no clearing any more.
func (g *Guard) Disarmed(path string) { g.send('-', path) }

// Close ends the guard after a clean shutdown (it clears what is left) and
// removes the state file when nothing is armed any more.
func (g *Guard) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.state != "" && len(g.armed) == 0 {
		_ = os.Remove(g.state)
	}
	if g.w == nil {
		return nil
	}
	w := g.w
	g.w = nil
	return w.Close()
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
