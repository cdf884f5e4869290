package cgroupfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// The state file lists exactly the armed set after every change, so a
// restore after escrad and its guard died together finds every group.
func TestRecorderStateFileFollowsArmedSet(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "run", "escrad-h1.oom-armed")
	g := NewRecorder()
	if err := g.RecordIn(state); err != nil {
		t.Fatal(err)
	}
	g.Armed("/sys/fs/cgroup/memory/a/memory.oom_control")
	g.Armed("/sys/fs/cgroup/memory/b/memory.oom_control")
	g.Disarmed("/sys/fs/cgroup/memory/a/memory.oom_control")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, "/b/memory.oom_control\n") || strings.Contains(got, "/a/") {
		t.Fatalf("state file:\n%s", got)
	}
	if _, err := os.Stat(state + ".tmp"); err == nil {
		t.Fatal("temporary state file left behind")
	}
	g.Close()
	if _, err := os.Stat(state); err != nil {
		t.Fatal("state file removed while a group is still armed")
	}
	g.Disarmed("/sys/fs/cgroup/memory/b/memory.oom_control")
	g.Close()
	if _, err := os.Stat(state); err == nil {
		t.Fatal("state file kept after a clean close with nothing armed")
	}
}

// RestoreRecorded writes 0 to listed and extra files, skips groups that
// are gone and refuses lines that are not a memory.oom_control path.
func TestRestoreRecordedWritesZero(t *testing.T) {
	dir := t.TempDir()
	mk := func(name, content string) string {
		p := filepath.Join(dir, name, "memory.oom_control")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	waiting := mk("waiting", "oom_kill_disable 1\nunder_oom 1\n")
	idle := mk("idle", "oom_kill_disable 1\nunder_oom 0\n")
	clear := mk("clear", "oom_kill_disable 0\nunder_oom 0\n")
	victim := filepath.Join(dir, "not-a-cgroup-file")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	lines := "# comment\n" + waiting + "\n" + filepath.Join(dir, "gone", "memory.oom_control") + "\n" + victim + "\nrelative/memory.oom_control\n"
	if err := os.WriteFile(state, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := RestoreRecorded(state, []string{idle, waiting, clear})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Restored{}
	for _, r := range res {
		got[r.Path] = r
	}
	if len(got) != 5 {
		t.Fatalf("want waiting, idle, clear and two refused lines, got %+v", res)
	}
	if r := got[waiting]; r.Err != nil || !r.UnderOOM || !r.Armed {
		t.Fatalf("waiting group: %+v", r)
	}
	if r := got[idle]; r.Err != nil || r.UnderOOM || !r.Armed {
		t.Fatalf("idle group: %+v", r)
	}
	// A labelled container escrad never armed is listed too: not reported
	// as one that was armed.
	if r := got[clear]; r.Err != nil || r.Armed {
		t.Fatalf("already clear group: %+v", r)
	}
	for _, p := range []string{waiting, idle} {
		if b, _ := os.ReadFile(p); b[0] != '0' {
			t.Fatalf("%s not written: %q", p, b)
		}
	}
	if r := got[victim]; r.Err == nil {
		t.Fatal("a path that is not memory.oom_control was accepted")
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("refused path written: %q", b)
	}
	if res, err := RestoreRecorded(filepath.Join(dir, "no-state"), nil); err != nil || len(res) != 0 {
		t.Fatalf("missing state file: %v %v", res, err)
	}
}

// A v1 group whose trap cannot be set up (here: no cgroup.event_control,
// as for a group being removed) gets its OOM killer back and leaves the
// state file: nothing stays listed that no watcher ever armed.
func TestFailedArmUnlists(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]string{"cpu.cfs_quota_us": "-1", "cpu.stat": "nr_periods 0\n",
		"memory.limit_in_bytes": "33554432", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	grp, err := cgroups.Open(cgroups.Paths{Version: cgroups.V1, CPU: dir, CPUAcct: dir, Memory: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	state := filepath.Join(t.TempDir(), "oom-armed")
	rec := NewRecorder()
	if err := rec.RecordIn(state); err != nil {
		t.Fatal(err)
	}
	SetGuard(rec)
	defer SetGuard(nil)
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(1, grp); err == nil {
		t.Fatal("armed a group without cgroup.event_control")
	}
	b, _ := os.ReadFile(state)
	if strings.Contains(string(b), dir) {
		t.Fatalf("failed arm still listed in the state file:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.oom_control")); !strings.HasPrefix(string(b), "0") {
		t.Fatalf("memory.oom_control left %q after a failed arm", b)
	}
}
