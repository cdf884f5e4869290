package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/store"
)

// Defining a pema app starts its loop and proxy; the same budget with a
// new SLO reaches the running loop (Fig 20); deleting the app stops the
// proxy; the RHDb goes to the controller's bbolt file.
func TestPEMAAppLifecycle(t *testing.T) {
	dir := t.TempDir()
	st, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, func(c *Config) { c.Store = st })
	spec := AppSpec{Name: "shop", CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.1, Policy: "pema",
		SLO: &adminapi.SLO{P95: 50 * time.Millisecond, Listen: "127.0.0.1:0", Upstream: "127.0.0.1:9", Interval: time.Hour}}
	if err := s.DefineApp(spec); err != nil {
		t.Fatal(err)
	}
	l := s.PEMALoop("shop")
	if l == nil {
		t.Fatal("no loop")
	}
	addr := l.ProxyAddr()
	if c, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("proxy not listening: %v", err)
	} else {
		c.Close()
	}
	spec.SLO = &adminapi.SLO{P95: 20 * time.Millisecond, Listen: "127.0.0.1:0", Upstream: "127.0.0.1:9", Interval: time.Hour}
	if err := s.DefineApp(spec); err != nil {
		t.Fatal(err)
	}
	if s.PEMALoop("shop") != l {
		t.Fatal("an SLO change replaced the loop")
	}
	l.Tick() // no members: a record at the new SLO
	if r := l.Records(); len(r) != 1 || r[0].SLOSecond != 0.020 {
		t.Fatalf("records %+v", r)
	}
	bad := spec
	bad.SLO = nil
	if err := s.DefineApp(bad); err == nil {
		t.Fatal("pema without an slo accepted")
	}
	if _, err := s.RemoveApp(context.Background(), "shop"); err != nil {
		t.Fatal(err)
	}
	if s.PEMALoop("shop") != nil {
		t.Fatal("loop survives its app")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("proxy still listening after the app was deleted")
	}
}
