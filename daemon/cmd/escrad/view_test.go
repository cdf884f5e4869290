package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// escrad view prepare writes the view and prints the --mount value;
// bad input is one line and a non-zero exit.
func TestViewPrepare(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := runView([]string{"prepare", "web", "--cpus", "1", "--view-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	p := filepath.Join(dir, "web", "online")
	if got := out.String(); got != "type=bind,source="+p+",target=/sys/devices/system/cpu/online,readonly\n" {
		t.Errorf("printed %q", got)
	}
	if b, err := os.ReadFile(p); err != nil || strings.Count(string(b), "\n") != 1 {
		t.Errorf("view %q %v", b, err)
	}
	out.Reset()
	if code := runView([]string{"prepare", "--view-dir", dir, "--print", "path", "db"}, &out, &errb); code != 0 || out.String() != filepath.Join(dir, "db", "online")+"\n" {
		t.Errorf("--print path: %d %q %s", code, out.String(), errb.String())
	}
	for _, args := range [][]string{{}, {"frob"}, {"prepare"}, {"prepare", "web", "--cpus", "x"}, {"prepare", "a", "b"},
		{"prepare", "web", "--print", "yaml"}, {"prepare", "../etc", "--view-dir", dir}, {"prepare", "web", "--cpus", "-2", "--view-dir", dir}} {
		errb.Reset()
		code := runView(args, &out, &errb)
		if code == 0 || strings.Count(errb.String(), "\n") != 1 || !strings.HasPrefix(errb.String(), "escrad: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
