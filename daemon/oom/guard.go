package oom

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
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

// Restored is what RestoreRecorded did to one memory.oom_control.
type Restored struct {
	Path     string
	Armed    bool  // it was set (oom_kill_disable 1, or a memory.high brake), not already clear
	UnderOOM bool  // a task was waiting at its limit: the kernel OOM killer acts now
	Err      error // nil: oom_kill_disable is 0
}

// RestoreRecorded re-enables the kernel OOM killer of every group listed
// in the state file plus extra (the labelled containers' groups), for when
// escrad and its guard died together. A listed group that is gone
// (container removed) is skipped. The state file is left for the next
// escrad to rewrite. A missing state file is not an error (nothing armed).
func RestoreRecorded(state string, extra []string) ([]Restored, error) {
	paths := map[string]bool{}
	for _, p := range extra {
		paths[p] = true
	}
	b, err := os.ReadFile(state)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("oom state: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			paths[l] = true
		}
	}
	ps := make([]string, 0, len(paths))
	for p := range paths {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	var out []Restored
	for _, p := range ps {
		r, ok := restoreOne(p)
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// restoreOne writes oom_kill_disable 0 (v2: memory.high max, the brake
// released); ok is false when the group is gone. Only absolute, clean paths
// to a memory.oom_control or memory.high are touched (the state file is
// root's, but a corrupt line must not make us write elsewhere).
func restoreOne(p string) (Restored, bool) {
	r := Restored{Path: p}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Base(p) != "memory.oom_control" && filepath.Base(p) != "memory.high" {
		r.Err = errors.New("not a memory.oom_control or memory.high path; skipped")
		return r, true
	}
	before, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false
	}
	if v, ok := cgroups.KeyedValue(before, "under_oom"); ok && v == 1 {
		r.UnderOOM = true
	}
	if filepath.Base(p) == "memory.high" {
		r.Armed = strings.TrimSpace(string(before)) != "max"
	} else if v, ok := cgroups.KeyedValue(before, "oom_kill_disable"); ok && v == 1 {
		r.Armed = true
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false
	}
	if err == nil {
		_, err = f.Write(restoreValue(p))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	r.Err = err
	return r, true
}

// restoreValue is what clears an armed file: oom_kill_disable 0 (v1), or
// no brake, memory.high max (v2).
func restoreValue(p string) []byte {
	if filepath.Base(p) == "memory.high" {
		return []byte("max")
	}
	return []byte("0")
}

// UnderOOM reports whether a task of the group of memory.oom_control p
// waits at its limit (false when the group is gone).
func UnderOOM(p string) bool {
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	v, ok := cgroups.KeyedValue(b, "under_oom")
	return ok && v == 1
}

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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
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
