package scripts_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// trackedFiles lists the files git tracks, relative to the repository root.
func trackedFiles(t *testing.T, patterns ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git missing")
	}
	cmd := exec.Command("git", append([]string{"ls-files", "-z", "--"}, patterns...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatalf("git ls-files %v lists nothing", patterns)
	}
	return files
}

// elfMachine says whether the first bytes are an ELF header and, if so,
// its e_machine.
func elfMachine(head []byte) (bool, uint16) {
	if len(head) < 4 || !bytes.Equal(head[:4], []byte("\x7fELF")) {
		return false, 0
	}
	if len(head) < 20 {
		return true, 0
	}
	if head[5] == 2 { // ELFDATA2MSB
		return true, binary.BigEndian.Uint16(head[18:20])
	}
	return true, binary.LittleEndian.Uint16(head[18:20])
}

// TestNoTrackedBinaries fails when git tracks an ELF file: an executable,
// a library or an object, the bpf backend's BPF object included (make
// build compiles it from daemon/source/bpf/c with scripts/bpf.sh).
// Releases are built from source (make build, make deb).
func TestNoTrackedBinaries(t *testing.T) {
	for _, f := range trackedFiles(t) {
		fh, err := os.Open(filepath.Join("..", f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		head := make([]byte, 20)
		n, _ := io.ReadFull(fh, head)
		fh.Close()
		if elf, machine := elfMachine(head[:n]); elf {
			t.Errorf("%s is an ELF file (e_machine %d): remove it from git (git rm --cached) and build it instead; make build writes bin/ and the BPF object", f, machine)
		}
	}
}

// The check itself: a host executable and a BPF object are caught, text
// is not.
func TestElfMachine(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if elf, m := elfMachine(b[:20]); !elf || m == 0 {
		t.Errorf("the test binary reads as elf=%v machine=%d", elf, m)
	}
	// The header of a 64-bit little-endian BPF relocatable (EM_BPF, 247),
	// as clang -target bpfel writes it.
	bpfObj := []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\xf7\x00")
	if elf, m := elfMachine(bpfObj); !elf || m != 247 {
		t.Errorf("a BPF object's header reads as elf=%v machine=%d, want an ELF file of machine 247", elf, m)
	}
	if elf, _ := elfMachine([]byte("package main\n")); elf {
		t.Error("Go source read as ELF")
	}
}
