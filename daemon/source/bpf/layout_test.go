package bpf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// decode's offsets are struct escra_rec's, as bpf2go read them from the
// object's BTF.
func TestRecordLayoutMatchesObject(t *testing.T) {
	var r cfsEscraRec
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(r), recSize},
		{"cgroup_id", unsafe.Offsetof(r.CgroupId), offCgroupID},
		{"ts_ns", unsafe.Offsetof(r.TsNs), offTs},
		{"quota_ns", unsafe.Offsetof(r.QuotaNs), offQuota},
		{"period_ns", unsafe.Offsetof(r.PeriodNs), offPeriod},
		{"unused_ns", unsafe.Offsetof(r.UnusedNs), offUnused},
		{"throttled_ns", unsafe.Offsetof(r.ThrottledNs), offThrottledNs},
		{"nr_throttled", unsafe.Offsetof(r.NrThrottled), offNrThrottled},
		{"throttled", unsafe.Offsetof(r.Throttled), offThrottled},
		{"kind", unsafe.Offsetof(r.Kind), offKind},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d in the object, decode uses %d", c.name, c.got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	in := cfsEscraRec{CgroupId: 77, TsNs: 5e9, QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 3e6,
		ThrottledNs: 9e6, NrThrottled: 4, Throttled: 1, Kind: kindThrottle}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, in); err != nil {
		t.Fatal(err)
	}
	r, kind, ok := decode(b.Bytes())
	if !ok || kind != kindThrottle || r.CgroupID != 77 || r.TimestampNs != 5e9 || r.QuotaNs != 20e6 || r.PeriodNs != 100e6 ||
		r.UnusedNs != 3e6 || r.ThrottledNs != 9e6 || r.NrThrottled != 4 || !r.Throttled {
		t.Fatalf("decoded %+v", r)
	}
	if _, _, ok := decode(b.Bytes()[:recSize-1]); ok {
		t.Error("a short record decoded")
	}
}

// The committed object was generated from the committed sources: `make
// bpf` writes cfs.sum with it, and the hash catches a source edited
// without regenerating. TestObjectRebuilds checks the bytes where clang
// is installed.
func TestObjectFresh(t *testing.T) {
	sum, err := os.ReadFile("cfs.sum")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	if len(lines) != 2 {
		t.Fatalf("cfs.sum: %q", sum)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("cfs.sum line %q", l)
		}
		b, err := os.ReadFile(f[1])
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != f[0] {
			t.Errorf("%s changed since cfs_bpfel.o was generated: run make bpf and commit the result", f[1])
		}
	}
}

// A kernel without BTF: one clear error, before anything is loaded.
func TestNoBTF(t *testing.T) {
	old := btfPath
	btfPath = "/nonexistent/vmlinux"
	defer func() { btfPath = old }()
	_, err := New(nil)
	if !errors.Is(err, ErrNoBTF) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v, want ErrNoBTF", err)
	}
}

// Regenerating with gen.go's own bpf2go command reproduces the committed
// object and bindings byte for byte (clang output is deterministic).
func TestObjectRebuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bpf2go")
	}
	for _, tool := range []string{"clang", "llvm-strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh installs it)", tool)
		}
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(l, "//go:generate go run github.com/cilium/ebpf/cmd/bpf2go "); ok {
			args = splitQuoted(rest)
		}
	}
	if args == nil {
		t.Fatal("gen.go has no bpf2go line")
	}
	dir := t.TempDir()
	// Flags go before the positional stem and source.
	cmd := exec.Command("go", append([]string{"run", "github.com/cilium/ebpf/cmd/bpf2go", "-output-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=bpf")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"cfs_bpfel.o", "cfs_bpfel.go"} {
		a, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from a fresh build: run make bpf and commit the result", f)
		}
	}
}

// splitQuoted splits a go:generate line as go generate does: on spaces,
// with double-quoted words kept whole.
func splitQuoted(s string) []string {
	var out []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return append(out, s[1:])
			}
			out = append(out, s[1:end+1])
			s = s[end+2:]
			continue
		}
		end := strings.IndexByte(s, ' ')
		if end < 0 {
			return append(out, s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}
