package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// setupCgroups mounts cgroup2 (if /init did not) and enables cpu+memory
// for children of the root.
func setupCgroups() error {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		if err := os.MkdirAll(cgroupRoot, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("none", cgroupRoot, "cgroup2", 0, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu +memory"), 0o644)
}

type cgroup struct {
	path string
	id   uint64
}

// newCgroup creates a cgroup v2 directory; its id is the directory's inode.
func newCgroup(name string) (*cgroup, error) {
	p := filepath.Join(cgroupRoot, name)
	_ = os.Remove(p)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return nil, err
	}
	return &cgroup{path: p, id: st.Ino}, nil
}

func (c *cgroup) set(file, val string) error {
	if err := os.WriteFile(filepath.Join(c.path, file), []byte(val), 0o644); err != nil {
		return fmt.Errorf("%s/%s <- %q: %w", filepath.Base(c.path), file, val, err)
	}
	return nil
}

func (c *cgroup) get(file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(c.path, file))
	return strings.TrimSpace(string(b)), err
}

// keyed reads one "key value" line of a flat-keyed file (cpu.stat, memory.events).
func (c *cgroup) keyed(file, key string) (uint64, error) {
	s, err := c.get(file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no key %q", file, key)
}

// remove kills what is left in the cgroup and removes it.
func (c *cgroup) remove() {
	_ = os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0o644)
	for i := 0; i < 100; i++ {
		if err := os.Remove(c.path); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start runs this binary's workload subcommand inside the cgroup from its
// first instruction (clone3 CLONE_INTO_CGROUP).
func (c *cgroup) start(args ...string) (*exec.Cmd, error) {
	dir, err := os.Open(c.path)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off")
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// waitTimeout waits for cmd; on timeout it kills it and reports so.
func waitTimeout(cmd *exec.Cmd, d time.Duration) (*os.ProcessState, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState, nil
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return cmd.ProcessState, fmt.Errorf("still running after %v", d)
	}
}

func killedBy(ps *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func loadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), params, 0); err != nil {
		return fmt.Errorf("finit_module %s %q: %w", path, params, err)
	}
	return nil
}

func unloadModule() error {
	if err := unix.DeleteModule("escra", unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("delete_module escra: %w", err)
	}
	return nil
}

func moduleLoaded() bool {
	_, err := os.Stat("/sys/module/escra")
	return err == nil
}

// dmesg returns the kernel log buffer.
func dmesg() (string, error) {
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, n)
	m, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:m]), nil
}

// splats are the kernel log markers of a bug; any of them fails a run. A
// bare "Call Trace" is not one: OOM-kill reports (expected here) dump stacks.
var splats = []string{"WARNING:", "BUG:", "KASAN", "Oops", "general protection fault", "cut here", "refcount_t:", "list_add corruption", "list_del corruption", "allocation failed"}

func findSplat(log string) string {
	for _, line := range strings.Split(log, "\n") {
		for _, s := range splats {
			if strings.Contains(line, s) {
				return line
			}
		}
	}
	return ""
}

func readProc(path string) string {
	b, _ := os.ReadFile(path)
	return string(bytes.TrimSpace(b))
}

// setOOMTimeout sets escra.ko's oom_timeout_ms and returns the restore.
// Scenarios about grants and denials use a generous value so that a busy
// shared host cannot turn them into timeouts; oom-timeout keeps 100 ms.
func setOOMTimeout(ms int) (restore func(), err error) {
	const param = "/sys/module/escra/parameters/oom_timeout_ms"
	old := readProc(param)
	if err := os.WriteFile(param, []byte(strconv.Itoa(ms)), 0o644); err != nil {
		return nil, err
	}
	return func() { _ = os.WriteFile(param, []byte(old), 0o644) }, nil
}
