package server

import (
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// Scoping is on for every TLS host: h1's certificate binds web, h2's
// binds nothing, h3's binds nothing but --host-apps gives it db. Each
// registers only what it is bound to; the unbound host registers nothing
// and is counted; a container id another host already holds is refused.
func TestHostScopedByDefault(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.GenerateBound(dir, []string{"h1"}, []string{"web"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Generate(dir, []string{"h2", "h3"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	sc, err := auth.ServerConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, func(c *Config) { c.TLS = sc; c.HostApps = map[string][]string{"h3": {"db"}} })
	d := map[string]*simdaemon.Daemon{}
	for _, h := range []string{"h1", "h2", "h3"} {
		c, err := simdaemon.DialTLS(s.TCPAddr(), h, 4, 8<<30, clientTLS(t, dir, h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		d[h] = c
	}
	eventually(t, "the unbound host counted", func() bool { return s.Stats().Dropped["host_unbound"] == 1 })
	d["h1"].Register(1, "web", -1, 0, 10*mib)
	d["h1"].Register(2, "db", -1, 0, 10*mib)
	d["h2"].Register(1, "web", -1, 0, 10*mib)
	d["h3"].Register(1, "db", -1, 0, 10*mib)
	eventually(t, "h1's web and h3's db registered, the rest refused", func() bool {
		return len(s.Snapshot().Containers) == 2 && s.Stats().Dropped["app_not_allowed"] == 2
	})
	for _, c := range s.Snapshot().Containers {
		if want := map[string]string{"h1": "web", "h3": "db"}[c.HostID]; c.App != want {
			t.Fatalf("host %s registered a container of %s", c.HostID, c.App)
		}
	}
	// h3 claims h1's container (a phantom borrowing a real id).
	d["h3"].RegisterAs(2, "h1-c1", "db", -1, 0, 10*mib)
	eventually(t, "the borrowed id refused", func() bool { return s.Stats().Dropped["container_id_taken"] == 1 })
	if n := len(s.Snapshot().Containers); n != 2 {
		t.Fatalf("%d containers after a borrowed id; want 2", n)
	}
	// Once h1's container left, its id may be registered again (a
	// restarted escrad, a new session).
	d["h1"].Unregister(1)
	eventually(t, "h1's container gone", func() bool { return len(s.Snapshot().Containers) == 1 })
	d["h1"].RegisterAs(3, "h1-c1", "web", -1, 0, 10*mib)
	eventually(t, "the released id registered again", func() bool { return len(s.Snapshot().Containers) == 2 })
}

// A plain (--insecure) host has no proven identity: it may register any
// app unless --host-apps names it.
func TestPlainHostScopedOnlyWhenNamed(t *testing.T) {
	s := start(t, func(c *Config) { c.HostApps = map[string][]string{"h1": {"web"}} })
	h1, h2 := dial(t, s, "h1", 4), dial(t, s, "h2", 4)
	h1.Register(1, "web", -1, 0, 10*mib)
	h1.Register(2, "db", -1, 0, 10*mib)
	h2.Register(1, "db", -1, 0, 10*mib)
	eventually(t, "h1's web and h2's db registered, h1's db refused", func() bool {
		return len(s.Snapshot().Containers) == 2 && s.Stats().Dropped["app_not_allowed"] == 1
	})
}
