package store

import (
	"context"
	"errors"
	"testing"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
)

// Records written to the bolt file are there after a reopen, exactly; a
// second opener of the same directory is refused while the first holds it.
func TestBoltKeepsRecordsAndLocks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := allocator.DefaultParams()
	p.Kappa, p.Upsilon = 0.5, 7
	web := Record{Spec: adminapi.AppSpec{Name: "web", CPUCores: 2.5, MemoryBytes: 3 << 30, Sigma: 0.2, Params: &p, Policy: "escra-paper"},
		Deploy: &adminapi.DeployRequest{Containers: []adminapi.DeployContainer{{Name: "a", Image: "img"}}}}
	for _, r := range []Record{web, {Spec: adminapi.AppSpec{Name: "gone", CPUCores: 1, MemoryBytes: 1 << 30}}} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBolt(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open of a held store: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("records after reopen: %+v", all)
	}
	got := all[0]
	if got.Spec.Name != "web" || got.Spec.CPUCores != 2.5 || got.Spec.MemoryBytes != 3<<30 || got.Spec.Sigma != 0.2 ||
		got.Spec.Policy != "escra-paper" || got.Spec.Params == nil || *got.Spec.Params != p ||
		got.Deploy == nil || len(got.Deploy.Containers) != 1 || got.Deploy.Containers[0].Image != "img" {
		t.Fatalf("record after reopen: %+v", got)
	}
	if r, ok, err := s.Get(ctx, "web"); err != nil || !ok || r.Spec.CPUCores != 2.5 {
		t.Fatalf("get: %+v %v %v", r, ok, err)
	}
	if _, ok, err := s.Get(ctx, "gone"); err != nil || ok {
		t.Fatalf("deleted record: %v %v", ok, err)
	}
	if err := s.Put(ctx, Record{Spec: adminapi.AppSpec{Name: "../x"}}); err == nil {
		t.Fatal("bad name stored")
	}
}

// A log keeps its records in order across a reopen of the file.
func TestBoltLog(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Log("pema/app/0")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := l.Append([]byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, _ = s.Log("pema/app/0")
	all, err := l.All()
	if err != nil || len(all) != 3 || string(all[0]) != "a" || string(all[2]) != "c" {
		t.Fatalf("%q %v", all, err)
	}
	if _, err := s.Log(""); err == nil {
		t.Fatal("empty log name accepted")
	}
	// The apps bucket is untouched by logs.
	if rs, err := s.List(context.Background()); err != nil || len(rs) != 0 {
		t.Fatalf("apps %v %v", rs, err)
	}
}
