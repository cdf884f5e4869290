package cgroupfs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the guard process, as escrad does.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == GuardArg {
		RunGuard(os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A guard killed alone is replaced and told the armed set: when escrad's
// end closes afterwards, the replacement clears both the group armed
// before the kill and the one armed after it.
func TestGuardKilledAloneIsReplaced(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name, "memory.oom_control")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before, after := file("before"), file("after")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g, err := StartGuard(exe)
	if err != nil {
		t.Fatal(err)
	}
	restarts := make(chan [2]int, 4)
	g.Report(nil, func(o, n int, err error) {
		if err != nil {
			t.Errorf("guard restart: %v", err)
		}
		restarts <- [2]int{o, n}
	})
	defer g.Close()

	g.Armed(before)
	first := g.Pid()
	if first <= 0 {
		t.Fatalf("guard pid %d", first)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-restarts:
		if r[0] != first || r[1] <= 0 || r[1] == first {
			t.Fatalf("restart reported old %d new %d (killed %d)", r[0], r[1], first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("guard killed alone was not replaced")
	}
	if p := g.Pid(); p == first || p <= 0 {
		t.Fatalf("guard pid %d after the restart (killed %d)", p, first)
	}
	g.Armed(after)

	// escrad's end closes (as when escrad dies): the replacement clears both.
	repl := g.Pid()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range []string{before, after} {
		for {
			b, _ := os.ReadFile(p)
			if strings.TrimSpace(string(b)) == "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still %q after the pipe closed: the replacement guard (pid %d) did not know it", p, b, repl)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case r := <-restarts:
		t.Fatalf("guard restarted after Close: %v", r)
	case <-time.After(200 * time.Millisecond):
	}
}
