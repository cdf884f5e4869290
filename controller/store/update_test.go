package store

import (
	"context"
	"errors"
	"testing"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/internal/etcdtest"
)

// A write that lands between Update's read and its write (another
// controller's, or an operator's on another admin endpoint) is not lost:
// the compare-and-swap on the record's revision fails and Update reads
// again, so its change is made on top of the other one.
func TestEtcdUpdateCompareAndSwap(t *testing.T) {
	e := etcdtest.Start(t)
	a, b := openEtcd(t, e), openEtcd(t, e)
	ctx := context.Background()
	if err := a.Put(ctx, Record{Spec: adminapi.AppSpec{Name: "web", CPUCores: 1, MemoryBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, _, err := a.Update(ctx, "web", func(r *Record, exists bool) error {
		calls++
		if calls == 1 { // b writes after a read
			if err := b.Put(ctx, Record{Spec: adminapi.AppSpec{Name: "web", CPUCores: 4, MemoryBytes: 1 << 30}}); err != nil {
				t.Fatal(err)
			}
		}
		r.Spec.MemoryBytes = 2 << 30
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("update: %v after %d reads; want success after 2", err, calls)
	}
	r, _, _ := b.Get(ctx, "web")
	if r.Spec.CPUCores != 4 || r.Spec.MemoryBytes != 2<<30 {
		t.Fatalf("stored %+v; want b's 4 cores and a's 2 GiB", r.Spec)
	}
	// f's error writes nothing.
	stop := errors.New("refused")
	if _, _, err := a.Update(ctx, "web", func(r *Record, _ bool) error { r.Spec.CPUCores = 9; return stop }); !errors.Is(err, stop) {
		t.Fatalf("update with a refusing f: %v", err)
	}
	if r, _, _ := b.Get(ctx, "web"); r.Spec.CPUCores != 4 {
		t.Fatalf("a refused update wrote %v cores", r.Spec.CPUCores)
	}
}
