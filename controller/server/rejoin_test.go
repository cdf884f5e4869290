package server

import (
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/store"
)

// The rejoin grace holds only apps a previous controller ran (found in the
// state store): a first start, or --store none, has no daemons holding an
// earlier controller's limits, and holding its apps would deny their first
// OOM requests (the VM tests' hogs were killed that way).
func TestRejoinGraceOnlyForStoredApps(t *testing.T) {
	dir := t.TempDir()
	app := AppSpec{Name: "shop", CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.5}
	holding := func(s *Server) bool {
		for _, a := range s.appList() {
			if a.Name == "shop" {
				return a.Holding()
			}
		}
		t.Fatal("app shop not defined")
		return false
	}
	run := func(mod func(*Config)) bool {
		s := start(t, func(c *Config) {
			c.Apps, c.RejoinGrace = []AppSpec{app}, time.Hour
			mod(c)
		})
		defer s.Close()
		return holding(s)
	}
	if run(func(*Config) {}) {
		t.Error("--apps without a store: held after start")
	}
	var st *store.Bolt
	openStore := func(c *Config) {
		var err error
		if st, err = store.OpenBolt(dir); err != nil {
			t.Fatal(err)
		}
		c.Store = st
	}
	if run(openStore) {
		t.Error("first start on an empty store: held")
	}
	st.Close()
	if !run(openStore) {
		t.Error("restart on the store that holds the app: not held")
	}
	st.Close()
}
