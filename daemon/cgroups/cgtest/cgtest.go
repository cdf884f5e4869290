// Package cgtest makes throw-away cgroups (cgroup v1 hosts: one directory
// per controller) and runs processes in them, for the daemon's tests and
// benchmark. Everything is removed when the test ends.
package cgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
)

var ctrls = []string{"cpu", "cpuacct", "memory", "cpuset"}

// New creates the cgroup /escra-test-PID-NAME in every v1 controller and
// returns its path relative to the hierarchy roots. It skips the test on a
// host where that is impossible (not root, not cgroup v1).
func New(t testing.TB, name string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if cgroups.HostVersion() != cgroups.V1 {
		t.Skip("cgtest makes v1 cgroups; this host runs cgroup v2")
	}
	rel := fmt.Sprintf("/escra-test-%d-%s", os.Getpid(), name)
	if err := Make(rel); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(rel) })
	return rel
}

// Make creates rel in every controller (cpuset gets its parent's cpus/mems).
func Make(rel string) error {
	for _, c := range ctrls {
		dir := filepath.Join("/sys/fs/cgroup", c, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if c == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Remove kills the tasks left in rel and removes it.
func Remove(rel string) {
	for _, c := range ctrls {
		dir := filepath.Join("/sys/fs/cgroup", c, rel)
		for i := 0; i < 100; i++ {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			pids := strings.Fields(string(b))
			if len(pids) == 0 {
				break
			}
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = os.Remove(dir)
	}
}

// Write writes a control file of rel in controller c.
func Write(t testing.TB, c, rel, file, val string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("/sys/fs/cgroup", c, rel, file), []byte(val), 0); err != nil {
		t.Fatal(err)
	}
}

// Open opens rel's control files as a cgroups.Group, closed when the
// test ends.
func Open(t testing.TB, rel string) *cgroups.Group {
	t.Helper()
	p, err := cgroups.PathsForCgroup(rel)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroups.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// Read reads a control file (trimmed).
func Read(t testing.TB, c, rel, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", c, rel, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Proc is a process started inside a cgroup.
type Proc struct {
	Cmd  *exec.Cmd
	done chan error
	out  outBuf
	errs outBuf
}

// outBuf keeps what the process printed, for WaitOutput.
type outBuf struct {
	mu sync.Mutex
	b  []byte
}

func (o *outBuf) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.b = append(o.b, p...)
	o.mu.Unlock()
	return len(p), nil
}

func (o *outBuf) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.b)
}

// Start runs bin with args inside rel: the process is created stopped on a
// pipe, moved into every controller, then released, so nothing it
// allocates is charged elsewhere.
func Start(rel, bin string, args ...string) (*Proc, error) {
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read x; exec "$0" "$@"`, bin}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = &p.out, &p.errs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for _, c := range ctrls {
		if err := os.WriteFile(filepath.Join("/sys/fs/cgroup", c, rel, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, err
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		return nil, err
	}
	stdin.Close()
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// Wait waits up to d for the process and returns its wait status.
func (p *Proc) Wait(d time.Duration) (syscall.WaitStatus, error) {
	select {
	case err := <-p.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.Sys().(syscall.WaitStatus), nil
		}
		if err != nil {
			return 0, err
		}
		return p.Cmd.ProcessState.Sys().(syscall.WaitStatus), nil
	case <-time.After(d):
		return 0, fmt.Errorf("process %d still running after %v", p.Cmd.Process.Pid, d)
	}
}

// WaitOutput waits up to d for the process to print s (a test that needs
// a workload's allocation finished waits for its own report of it, not for
// a usage figure that a loaded machine reaches later).
func (p *Proc) WaitOutput(s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not print %q in %v (printed %q)", p.Cmd.Process.Pid, s, d, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Stderr is what the process wrote to its standard error so far.
func (p *Proc) Stderr() string {
	p.errs.mu.Lock()
	defer p.errs.mu.Unlock()
	return string(p.errs.b)
}

// Kill ends the process.
func (p *Proc) Kill() { _ = p.Cmd.Process.Kill() }

// Workload builds a workload (e.g. "memhog") into a temp dir and returns
// its path.
func Workload(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./workloads/"+name)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	return filepath.Join(dir, name)
}

func repoRoot() string {
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return wd
}
