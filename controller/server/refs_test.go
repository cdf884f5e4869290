package server

import (
	"testing"

	"github.com/escra-dev/escra/controller/app"
)

func TestRefsDenseAndSparseHandles(t *testing.T) {
	a := &app.App{}
	var tb refs
	handles := []uint32{1, 2, 7, denseRefs - 1, denseRefs, 1 << 31, ^uint32(0)}
	for i, h := range handles {
		tb.set(h, ref{app: a, id: string(rune('a' + i))})
	}
	tb.set(7, ref{app: a, id: "again"}) // a second set replaces, not adds
	if tb.len() != len(handles) {
		t.Fatalf("len %d, want %d", tb.len(), len(handles))
	}
	if len(tb.dense) != denseRefs {
		t.Fatalf("dense slice of %d, want %d: a huge handle must go to the map", len(tb.dense), denseRefs)
	}
	if r, ok := tb.get(7); !ok || r.id != "again" {
		t.Fatalf("get(7) = %+v, %v", r, ok)
	}
	for _, h := range []uint32{0, 3, denseRefs + 1, 1<<31 + 1} {
		if _, ok := tb.get(h); ok {
			t.Fatalf("get(%d) found a ref never set", h)
		}
	}
	tb.del(3) // never set: nothing changes
	tb.del(2)
	tb.del(^uint32(0))
	if _, ok := tb.get(2); ok || tb.len() != len(handles)-2 {
		t.Fatalf("after two deletes: get(2) %v, len %d", ok, tb.len())
	}
	seen := map[uint32]bool{}
	tb.each(func(h uint32, _ ref) {
		seen[h] = true
		tb.del(h)
	})
	if len(seen) != len(handles)-2 || tb.len() != 0 {
		t.Fatalf("each saw %v, then len %d", seen, tb.len())
	}
	for _, h := range handles {
		if _, ok := tb.get(h); ok {
			t.Fatalf("handle %d left after each deleted all", h)
		}
	}
}
