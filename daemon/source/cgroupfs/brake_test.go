package cgroupfs

import (
	"os"
	"path/filepath"
	"testing"
)

// A v2 brake (memory.high) listed in the state file is released with
// "max", not the "0" that clears a v1 oom_kill_disable: "0" in memory.high
// would throttle the group to a halt.
func TestRestoreRecordedReleasesV2Brake(t *testing.T) {
	dir := t.TempDir()
	high := filepath.Join(dir, "app", "memory.high")
	if err := os.MkdirAll(filepath.Dir(high), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(high, []byte("0\n"), 0o644); err != nil { // shorter than "max": a plain file is not truncated
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.WriteFile(state, []byte(high+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := RestoreRecorded(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Err != nil || res[0].UnderOOM || !res[0].Armed {
		t.Fatalf("restored %+v", res)
	}
	if b, _ := os.ReadFile(high); string(b) != "max" {
		t.Fatalf("memory.high %q after restore, want max", b)
	}
}
