package cgroupfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// While escrad is stopped (SIGSTOP) its deadline cannot fire: the guard
// releases a v1 group whose task waits at its limit, and only then. The
// "escrad" is a real process stopped and continued by signal; the group
// file is a stand-in with memory.oom_control's format.
func TestGuardReleasesWhileEscradStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	dir := t.TempDir()
	waiting := filepath.Join(dir, "a", "memory.oom_control")
	idle := filepath.Join(dir, "b", "memory.oom_control")
	for p, body := range map[string]string{waiting: "oom_kill_disable 1\nunder_oom 1\n", idle: "oom_kill_disable 1\nunder_oom 0\n"} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pid := cmd.Process.Pid
	go watchStopped(pid, 5*time.Millisecond, func() []string { return []string{waiting, idle} })
	time.Sleep(100 * time.Millisecond) // running: nothing may be released, however many checks ran
	if b, _ := os.ReadFile(waiting); string(b) == "0" {
		t.Fatal("released while escrad runs (its own deadline decides then)")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(waiting); string(b) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiting group was not released while escrad was stopped (Stopped=%v)", Stopped(pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b, _ := os.ReadFile(idle); string(b) != "oom_kill_disable 1\nunder_oom 0\n" {
		t.Fatalf("a group without a waiting task was written: %q", b)
	}
}
