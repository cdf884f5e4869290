package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The lock is per engine: a second taker is refused with the holder's pid,
// another engine is not, and a released lock can be taken again.
func TestEngineLock(t *testing.T) {
	dir := t.TempDir()
	a := engineKey("unix:///run/x/docker.sock", false, "h")
	l, err := lockEngine(dir, a)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockEngine(dir, a)
	if !errors.Is(err, errEngineTaken) || !strings.Contains(err.Error(), "escrad pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock of one engine: %v", err)
	}
	l2, err := lockEngine(dir, engineKey("unix:///run/y/docker.sock", false, "h"))
	if err != nil {
		t.Fatalf("another engine: %v", err)
	}
	l2.Close()
	l.Close()
	if l, err = lockEngine(dir, a); err != nil {
		t.Fatalf("after release: %v", err)
	}
	l.Close()
	// The same socket named through a symlinked directory is the same engine.
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o755)
	os.Symlink(real, filepath.Join(dir, "link"))
	if engineKey("unix://"+filepath.Join(dir, "link", "d.sock"), false, "h") != engineKey("unix://"+filepath.Join(real, "d.sock"), false, "h") {
		t.Fatal("a symlinked socket path is another engine")
	}
}

// Two real escrad processes on one engine: the second exits non-zero with
// one line naming the first, and the first keeps running.
func TestSecondEscradOnOneEngineExits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("escrad needs root")
	}
	bin := filepath.Join(t.TempDir(), "escrad")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	tmp := t.TempDir()
	args := []string{"--no-docker", "--insecure", "--controller", "127.0.0.1:1", "--host-id", "locktest",
		"--no-oom-guard", "--oom-state", filepath.Join(tmp, "oom-armed"), "--lock-dir", tmp, "--backend", "cgroupfs"}
	first := exec.Command(bin, args...)
	first.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := first.StderrPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Process.Kill(); first.Wait() })
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "escrad starting") {
				started <- true
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first escrad did not start")
	}
	second := exec.Command(bin, args...)
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || strings.Count(string(out), "\n") != 1 ||
		!strings.Contains(string(out), "already manages engine") || !strings.Contains(string(out), strconv.Itoa(first.Process.Pid)) {
		t.Fatalf("second escrad: %v, output %q", err, out)
	}
	if err := first.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the first escrad is gone: %v", err)
	}
}
