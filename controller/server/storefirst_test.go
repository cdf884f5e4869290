package server

import (
	"context"
	"errors"
	"testing"

	"github.com/escra-dev/escra/controller/store"
)

// A store that refuses a write (lost quorum, a deposed leader's fence)
// leaves nothing applied: a changed budget keeps its old value, a new app
// is not created, a deleted app stays. Once the store takes writes again
// the same calls go through.
func TestStoreRefusalLeavesNothingApplied(t *testing.T) {
	st := store.NewMemory()
	s := start(t, func(c *Config) { c.Store = st })
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	cores := func(name string) float64 {
		for _, a := range s.Snapshot().Apps {
			if a.Name == name {
				return a.CPUCores
			}
		}
		return -1
	}
	st.Refuse = store.ErrNotLeader
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 8, MemoryBytes: 1 << 30}); !errors.Is(err, ErrStore) {
		t.Fatalf("define with the store refusing: %v; want ErrStore", err)
	}
	if c := cores("web"); c != 1 {
		t.Fatalf("web has %v cores in effect after a refused write (store holds 1): applied without store", c)
	}
	if err := s.DefineApp(AppSpec{Name: "db", CPUCores: 2, MemoryBytes: 1 << 30}); !errors.Is(err, ErrStore) || cores("db") != -1 {
		t.Fatalf("new app with the store refusing: %v, in effect with %v cores", err, cores("db"))
	}
	if _, err := s.RemoveApp(context.Background(), "web"); !errors.Is(err, ErrStore) || cores("web") != 1 {
		t.Fatalf("delete with the store refusing: %v; web at %v cores", err, cores("web"))
	}
	st.Refuse = nil
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 8, MemoryBytes: 1 << 30}); err != nil || cores("web") != 8 {
		t.Fatalf("define with the store back: %v, %v cores", err, cores("web"))
	}
	if r, _, _ := st.Get(context.Background(), "web"); r.Spec.CPUCores != 8 {
		t.Fatalf("stored %v cores", r.Spec.CPUCores)
	}
}
