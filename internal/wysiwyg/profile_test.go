package wysiwyg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveAuto(t *testing.T) {
	dir := t.TempDir()
	const img = "sha256:3d9f2889d678aa00bb11cc22dd33ee44ff5566778899aabbccddeeff00112233"
	const other = "4c1e0000aaaabbbbccccddddeeeeffff0000111122223333444455556666777"

	if c, why := ResolveAuto(dir, img); c != C2 || !strings.Contains(why, "not profiled") {
		t.Fatalf("unprofiled image: got %v (%s), want C2, not profiled", c, why)
	}
	if err := RecordProfile(dir, img, VerdictWysiwyg); err != nil {
		t.Fatal(err)
	}
	if c, why := ResolveAuto(dir, img); c != C1 {
		t.Fatalf("image profiled wysiwyg: got %v (%s), want C1", c, why)
	}
	// The same image by its bare digest; another image is not affected.
	if c, _ := ResolveAuto(dir, strings.TrimPrefix(img, "sha256:")); c != C1 {
		t.Fatalf("bare digest: got %v, want C1", c)
	}
	if c, _ := ResolveAuto(dir, other); c != C2 {
		t.Fatalf("other image: got %v, want C2", c)
	}
	// A new profile replaces the old verdict.
	if err := RecordProfile(dir, img, VerdictShared); err != nil {
		t.Fatal(err)
	}
	if c, _ := ResolveAuto(dir, img); c != C2 {
		t.Fatalf("re-profiled shared: got %v, want C2", c)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("want one verdict file, got %d (temporary files left?)", len(ents))
	}

	// Bad input: refused when recording, shared when resolving.
	if err := RecordProfile(dir, img, "C1"); err == nil {
		t.Fatal("verdict C1 accepted")
	}
	for _, bad := range []string{"", "nginx:latest", "sha256:../../etc/passwd", "sha256:ABCDEF0123456789"} {
		if err := RecordProfile(dir, bad, VerdictWysiwyg); err == nil {
			t.Fatalf("image id %q accepted", bad)
		}
		if c, _ := ResolveAuto(dir, bad); c != C2 {
			t.Fatalf("image id %q resolved to %v", bad, c)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, other), []byte("maybe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, why := ResolveAuto(dir, other); c != C2 || !strings.Contains(why, "maybe") {
		t.Fatalf("garbled verdict: got %v (%s)", c, why)
	}
}
