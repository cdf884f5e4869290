package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestVersionScheme runs scripts/version.sh in a scratch repository through
// a release: before the tag, at it and after it; dpkg must sort the three
// in that order (the packages carry these versions).
func TestVersionScheme(t *testing.T) {
	for _, tool := range []string{"git", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing", tool)
		}
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "scripts/version.sh"), src, 0o755)
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.4.0\n"), 0o644)
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(msg string) {
		os.WriteFile(filepath.Join(dir, "f"), []byte(msg), 0o644)
		run("git", "add", "-A")
		run("git", "commit", "-qm", msg)
	}
	run("git", "init", "-q")
	commit("one")
	commit("two")
	before := run("scripts/version.sh")
	if !regexp.MustCompile(`^1\.4\.0~2\.g[0-9a-f]{7}$`).MatchString(before) {
		t.Errorf("before the tag: %q, want 1.4.0~2.gHASH", before)
	}
	run("git", "tag", "-a", "v1.4.0", "-m", "1.4.0")
	at := run("scripts/version.sh")
	if at != "1.4.0" {
		t.Errorf("at the tag: %q", at)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("edit"), 0o644)
	if v := run("scripts/version.sh"); v != "1.4.0.dirty" {
		t.Errorf("at the tag with an edit: %q", v)
	}
	commit("three")
	after := run("scripts/version.sh")
	if !regexp.MustCompile(`^1\.4\.0\+1\.g[0-9a-f]{7}$`).MatchString(after) {
		t.Errorf("after the tag: %q, want 1.4.0+1.gHASH", after)
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.5.0\n"), 0o644)
	commit("bump")
	next := run("scripts/version.sh")
	if !regexp.MustCompile(`^1\.5\.0~2\.g[0-9a-f]{7}$`).MatchString(next) {
		t.Errorf("after the bump: %q, want 1.5.0~2.gHASH", next)
	}
	for _, p := range [][2]string{{before, at}, {at, after}, {after, next}} {
		run("dpkg", "--compare-versions", p[0], "lt", p[1])
	}
	os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.5\n"), 0o644)
	cmd := exec.Command("scripts/version.sh")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "want X.Y.Z") {
		t.Errorf("VERSION 1.5 accepted: %v %s", err, out)
	}
}
