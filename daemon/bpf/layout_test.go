package bpf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
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
	} {
		if c.got != c.want {
			t.Errorf("%s at %d in the object, decode uses %d", c.name, c.got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	in := cfsEscraRec{CgroupId: 77, TsNs: 5e9, QuotaNs: 20e6, PeriodNs: 100e6, UnusedNs: 3e6,
		ThrottledNs: 9e6, NrThrottled: 4, Throttled: 1}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, in); err != nil {
		t.Fatal(err)
	}
	r, ok := decode(b.Bytes())
	if !ok || r.CgroupID != 77 || r.TimestampNs != 5e9 || r.QuotaNs != 20e6 || r.PeriodNs != 100e6 ||
		r.UnusedNs != 3e6 || r.ThrottledNs != 9e6 || r.NrThrottled != 4 || !r.Throttled {
		t.Fatalf("decoded %+v", r)
	}
	if _, ok := decode(b.Bytes()[:recSize-1]); ok {
		t.Error("a short record decoded")
	}
}

// The committed object was generated from the committed sources: `make
// bpf` writes cfs.sum with it. (Rebuilding the object here would need
// clang; the hash catches a source edited without regenerating.)
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
