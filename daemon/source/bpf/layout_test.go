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
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf/btf"

	"github.com/escra-dev/escra/daemon/source/bpf/bpftest"
)

// decode's offsets are struct escra_rec's, as bpf2go read them from the
// object's BTF (TestObjectMatchesBindings checks the built object's).
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

// checkSums compares a sums file (sha256sum's format, paths relative to
// the package) with the sources; stale reports each changed source.
func checkSums(t *testing.T, file string, stale func(src string)) {
	t.Helper()
	sum, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%s: %q", file, sum)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("%s line %q", file, l)
		}
		b, err := os.ReadFile(f[1])
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != f[0] {
			stale(f[1])
		}
	}
}

// The tracked bindings were generated from the tracked sources: make bpf
// writes cfs.sum with them, and the hash catches a source edited without
// regenerating. TestObjectRebuilds checks the bytes where clang is
// installed.
func TestBindingsFresh(t *testing.T) {
	checkSums(t, "cfs.sum", func(src string) {
		t.Errorf("%s changed since cfs_bpfel.go was generated: run make bpf and commit cfs_bpfel.go and cfs.sum", src)
	})
}

// The object this test binary embeds was built from the sources as they
// are: scripts/bpf.sh writes obj/cfs.sum with it.
func TestObjectFresh(t *testing.T) {
	bpftest.NeedObject(t, Built())
	checkSums(t, "obj/cfs.sum", func(src string) {
		t.Errorf("obj/cfs_bpfel.o was built from an older %s: run scripts/bpf.sh (make build does)", src)
	})
}

// The object's BTF has the layout of the Go types in cfs_bpfel.go: the
// types the ring buffer records and the maps' values are read as.
func TestObjectMatchesBindings(t *testing.T) {
	bpftest.NeedObject(t, Built())
	spec, err := loadCfs()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"escra_rec": cfsEscraRec{}, "escra_stats": cfsEscraStats{}, "escra_group": cfsEscraGroup{}} {
		var st *btf.Struct
		if err := spec.Types.TypeByName(name, &st); err != nil {
			t.Errorf("struct %s: %v", name, err)
			continue
		}
		gt := reflect.TypeOf(v)
		var fields []reflect.StructField
		for i := range gt.NumField() {
			if f := gt.Field(i); f.Name != "_" {
				fields = append(fields, f)
			}
		}
		if uintptr(st.Size) != gt.Size() || len(st.Members) != len(fields) {
			t.Errorf("struct %s: %d bytes, %d members in the object; %s: %d bytes, %d fields: run make bpf",
				name, st.Size, len(st.Members), gt.Name(), gt.Size(), len(fields))
			continue
		}
		for i, m := range st.Members {
			if uintptr(m.Offset.Bytes()) != fields[i].Offset {
				t.Errorf("%s.%s at %d in the object, %s.%s at %d: run make bpf",
					name, m.Name, m.Offset.Bytes(), gt.Name(), fields[i].Name, fields[i].Offset)
			}
		}
	}
}

// Built without the object: one clear error, and nothing else is tried.
func TestNotBuilt(t *testing.T) {
	old := _CfsBytes
	_CfsBytes = nil
	defer func() { _CfsBytes = old }()
	_, err := New(nil)
	if !errors.Is(err, ErrNotBuilt) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "make build") {
		t.Fatalf("err %v, want ErrNotBuilt", err)
	}
}

// A kernel without BTF: one clear error, before the object is read.
func TestNoBTF(t *testing.T) {
	oldPath, oldObj := btfPath, _CfsBytes
	btfPath = "/nonexistent/vmlinux"
	if !Built() {
		_CfsBytes = []byte("not read")
	}
	defer func() { btfPath, _CfsBytes = oldPath, oldObj }()
	_, err := New(nil)
	if !errors.Is(err, ErrNoBTF) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err %v, want ErrNoBTF", err)
	}
}

// bpf2go with gen.go's arguments reproduces the tracked bindings byte for
// byte, and its object is the one scripts/bpf.sh built: the script's
// clang flags are bpf2go's (clang output is deterministic).
func TestObjectRebuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bpf2go")
	}
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang not installed (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "../../../scripts/bpf.sh", "--bindings-to", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/bpf.sh --bindings-to: %v\n%s", err, out)
	}
	a, err := os.ReadFile("cfs_bpfel.go")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cfs_bpfel.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("cfs_bpfel.go differs from a fresh bpf2go run: run make bpf and commit the result")
	}
	bpftest.NeedObject(t, Built())
	if b, err = os.ReadFile(filepath.Join(dir, "cfs_bpfel.o")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(_CfsBytes, b) {
		t.Error("obj/cfs_bpfel.o differs from bpf2go's object of the same sources: scripts/bpf.sh's clang flags are not bpf2go's, or the object is stale (TestObjectFresh)")
	}
}
