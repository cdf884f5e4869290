package server

import (
	"context"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// A controller given a store writes what operators define and delete,
// never the allocator's per-period decisions (telemetry, OOM grants,
// joins); a new controller on the same store holds the same apps, with the
// same budget, σ, parameters and policy, and its members join that app
// rather than an auto-created one.
func TestDesiredStateStoredNotDecisions(t *testing.T) {
	st := store.NewMemory()
	s := start(t, func(c *Config) { c.Store = st; c.OOMStepBytes = 16 * mib })
	p := allocator.DefaultParams()
	p.Kappa, p.Gamma, p.Upsilon = 0.6, 0.3, 11
	web := AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.25, Params: &p, Policy: allocator.PolicyEscraPaper}
	if err := s.DefineApp(web); err != nil {
		t.Fatal(err)
	}
	if err := s.DefineApp(AppSpec{Name: "tmp", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveApp(context.Background(), "tmp"); err != nil {
		t.Fatal(err)
	}
	writes := st.WriteCount()
	d := dial(t, s, "h1", 4)
	d.Register(1, "web", -1, 0, 10*mib)
	d.Register(2, "web", -1, 0, 10*mib)
	d.Register(3, "undefined", -1, 0, 10*mib) // an auto app
	eventually(t, "bootstrap", func() bool { c, _ := d.Container(2); return c.QuotaUs > 0 })
	for range 20 {
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 1000}, {Handle: 2, UsageUs: 400000, Throttled: true}})
		time.Sleep(5 * time.Millisecond)
	}
	if _, _, err := d.OOM(2, 512*mib, 512*mib, 0, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "decisions", func() bool { return s.Stats().Decisions > 3 })
	if n := st.WriteCount(); n != writes {
		t.Fatalf("%d store writes during joins, telemetry and an OOM request; want none", n-writes)
	}

	s2 := start(t, func(c *Config) { c.Store = st })
	d2 := dial(t, s2, "h1", 4)
	d2.Register(1, "web", -1, 0, 10*mib)
	eventually(t, "member of the restored app", func() bool { c, _ := d2.Container(1); return c.QuotaUs > 0 })
	apps := s2.Snapshot().Apps
	if len(apps) != 1 {
		t.Fatalf("apps after restart: %+v (tmp was deleted, the auto app is not desired state)", apps)
	}
	a := apps[0]
	if a.Name != "web" || a.Auto || a.CPUCores != 2 || a.MemoryBytes != 1<<30 || a.Sigma != 0.25 || a.Params != p || a.Policy != allocator.PolicyEscraPaper {
		t.Fatalf("restored app differs from what was set: %+v", a)
	}
}
