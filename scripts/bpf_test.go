package scripts_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeClang is a clang stand-in for bpf.sh: it prints FAKE_CLANG_VERSION
// for --version, counts its compiles in COUNT, and writes the sources'
// bytes as the object (FAKE_CLANG_FAIL: fails).
const fakeClang = `#!/bin/sh
if [ "$1" = --version ]; then echo "fake ${FAKE_CLANG_VERSION:-1}"; exit 0; fi
echo compile >>"$COUNT"
[ -z "$FAKE_CLANG_FAIL" ] || exit 1
while [ $# -gt 0 ]; do
	case $1 in -o) out=$2; shift ;; -c) src=$2; shift ;; esac
	shift
done
cat "$src" c/cfs.h >"$out"
`

// bpfPkg copies daemon/source/bpf's sources into a new package directory.
func bpfPkg(t *testing.T, dir string) string {
	t.Helper()
	pkg := filepath.Join(dir, "pkg")
	if err := os.MkdirAll(filepath.Join(pkg, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cfs.bpf.c", "cfs.h"} {
		b, err := os.ReadFile(filepath.Join("../daemon/source/bpf/c", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "c", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pkg
}

// make build runs scripts/bpf.sh every time: a second build takes the
// object from the cache instead of compiling it, and anything that
// changes the object's bytes (a source, the compiler) compiles anew. The
// key does not depend on where the checkout is.
func TestBPFObjectCache(t *testing.T) {
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skip("libbpf-dev not installed (scripts/setup.sh installs it): bpf.sh hashes its headers")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "clang"), []byte(fakeClang), 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := bpfPkg(t, dir)
	count := filepath.Join(dir, "count")
	cache := filepath.Join(dir, "cache")
	env := []string{"BPF_CC=" + filepath.Join(bin, "clang"), "ESCRA_BPF_CACHE=" + cache, "ESCRA_BPF_DIR=" + pkg, "COUNT=" + count}
	bpfsh := func(extra []string, args ...string) (string, error) {
		cmd := exec.Command("./bpf.sh", args...)
		cmd.Env = append(append(os.Environ(), env...), extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	build := func(extra ...string) {
		t.Helper()
		if out, err := bpfsh(extra); err != nil {
			t.Fatalf("bpf.sh: %v\n%s", err, out)
		}
	}
	key := func(extra ...string) string {
		t.Helper()
		out, err := bpfsh(extra, "--key")
		if err != nil {
			t.Fatalf("bpf.sh --key: %v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	compiles := func() int {
		b, _ := os.ReadFile(count)
		return bytes.Count(b, []byte("compile"))
	}
	obj := filepath.Join(pkg, "obj", "cfs_bpfel.o")
	read := func() []byte {
		t.Helper()
		b, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	build()
	first := read()
	if compiles() != 1 || len(first) == 0 {
		t.Fatalf("first build: %d compiles, %d bytes; want 1 and the object", compiles(), len(first))
	}
	if sums, err := os.ReadFile(filepath.Join(pkg, "obj", "cfs.sum")); err != nil || !strings.Contains(string(sums), "c/cfs.h") {
		t.Errorf("obj/cfs.sum: %q, %v; want the sources' sums", sums, err)
	}
	build()
	if compiles() != 1 {
		t.Errorf("a second build compiled again (%d compiles)", compiles())
	}
	if err := os.Remove(obj); err != nil {
		t.Fatal(err)
	}
	build()
	if compiles() != 1 || !bytes.Equal(read(), first) {
		t.Errorf("a build after the object was removed: %d compiles, same bytes %v; want it from the cache", compiles(), bytes.Equal(read(), first))
	}

	// Another checkout of the same sources shares the cache.
	if other := bpfPkg(t, filepath.Join(dir, "other")); key("ESCRA_BPF_DIR="+other) != key() {
		t.Error("the key depends on the checkout's path")
	}

	k := key()
	h, err := os.OpenFile(filepath.Join(pkg, "c", "cfs.h"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = h.WriteString("/* edited */\n")
		h.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if key() == k {
		t.Error("editing cfs.h left the key unchanged")
	}
	build()
	if compiles() != 2 || bytes.Equal(read(), first) {
		t.Errorf("after editing cfs.h: %d compiles, object changed %v; want 2 and a new object", compiles(), !bytes.Equal(read(), first))
	}
	if sums, _ := os.ReadFile(filepath.Join(pkg, "obj", "cfs.sum")); strings.Contains(string(sums), sha256Hex(t, filepath.Join("..", "daemon", "source", "bpf", "c", "cfs.h"))) {
		t.Error("obj/cfs.sum still records the old cfs.h")
	}

	if key("FAKE_CLANG_VERSION=2") == key() {
		t.Error("another clang version left the key unchanged")
	}
	build("FAKE_CLANG_VERSION=2")
	if compiles() != 3 {
		t.Errorf("another clang version: %d compiles, want 3", compiles())
	}

	// A failed compile leaves nothing in the cache and the object as it was.
	before := read()
	if out, err := bpfsh([]string{"FAKE_CLANG_VERSION=3", "FAKE_CLANG_FAIL=1"}); err == nil || !strings.Contains(out, "bpf: clang failed") {
		t.Errorf("a failing compile: err %v, output %q; want a 'bpf: clang failed' error", err, out)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("cache after a failed compile: %v; want the 3 objects only", names)
	}
	if !bytes.Equal(read(), before) {
		t.Error("a failed compile changed the object")
	}
}

func sha256Hex(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
