package proto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates the Go code with the pinned tools and
// fails when the committed escrapb differs: edit escra.proto, run make proto.
func TestGeneratedCodeIsFresh(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("../scripts/genproto.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/genproto.sh: %v\n%s", err, b)
	}
	gen, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(gen) == 0 {
		t.Fatal("generator wrote nothing")
	}
	for _, e := range gen {
		fresh, err := os.ReadFile(filepath.Join(out, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(filepath.Join("escrapb", e.Name()))
		if err != nil {
			t.Fatalf("escrapb/%s missing: run make proto", e.Name())
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("escrapb/%s is stale: run make proto and commit the result", e.Name())
		}
	}
}
