package server

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/ingest"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

// pki issues host certificates bound to every app (scope_test.go tests
// narrower bindings).
func pki(t *testing.T, hosts ...string) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := auth.GenerateBound(dir, hosts, []string{auth.AnyApp}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func clientTLS(t *testing.T, dir, host string) *tls.Config {
	t.Helper()
	c, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, host), Key: auth.KeyPath(dir, host)}, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// controllerTLS is the controller's session and admin-API TLS configs
// from the certificates pki made in dir.
func controllerTLS(t *testing.T, dir string) (sessions, admin *tls.Config) {
	t.Helper()
	files := auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")}
	sc, err := auth.ServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := auth.AdminServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	return sc, ac
}

func startTLS(t *testing.T, dir string) *Server {
	t.Helper()
	sc, err := auth.ServerConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	if err != nil {
		t.Fatal(err)
	}
	return start(t, func(c *Config) { c.TLS = sc })
}

// A TLS controller: only daemons with a CA-signed certificate naming their
// host id get a session; telemetry moves limits only when its tag checks
// out with the session key and its batch_seq is new.
func TestTLSSessionsAndAuthenticatedTelemetry(t *testing.T) {
	dir := pki(t, "h1", "h2")
	s := startTLS(t, dir)
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}

	// Refused: plain TCP, a certificate of another CA, another host's certificate.
	if d, err := simdaemon.Dial(s.TCPAddr(), "h1", 4, 8<<30); err == nil {
		d.Close()
		t.Fatal("plain daemon got a session from a TLS controller")
	}
	other := pki(t, "h1")
	if d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, other, "h1")); err == nil {
		d.Close()
		t.Fatal("certificate of a foreign CA accepted")
	}
	if d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h2")); err == nil {
		d.Close()
		t.Fatal("h2's certificate accepted for host h1")
	}

	d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	var mu sync.Mutex
	var sent [][]byte
	d.Tap = func(b []byte) { mu.Lock(); sent = append(sent, b); mu.Unlock() }
	if err := d.Register(1, "web", -1, 0, 10*mib); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bootstrap over TLS", func() bool {
		c, ok := d.Container(1)
		return ok && c.QuotaUs == 200000
	})

	// Forged: idle telemetry signed with a wrong key, unsigned, truncated.
	forger := wire.Batcher{SessionID: d.SessionID, PeriodUs: 100000, MAC: wire.NewDatagramMAC([]byte("not the session key"))}
	plain := wire.Batcher{SessionID: d.SessionID, PeriodUs: 100000}
	for i := range 50 {
		st := &pb.CpuStat{Handle: 1, PeriodSeq: uint64(1000 + i), QuotaUs: 200000, UnusedUs: 199000, UsageUs: 1000}
		forger.Add(st, d.SendDatagram)
		forger.Flush(d.SendDatagram)
		plain.Add(st, d.SendDatagram)
		plain.Flush(d.SendDatagram)
	}
	d.SendDatagram([]byte{1, 2, 3})
	eventually(t, "forged datagrams counted", func() bool { return s.Stats().Dropped["forged"] >= 101 })
	time.Sleep(50 * time.Millisecond)
	if c, _ := container(s, "web", 1); c.CPUQuotaUs != 200000 {
		t.Fatalf("forged telemetry moved the quota to %d", c.CPUQuotaUs)
	}

	// Genuine idle telemetry scales the quota down (the path works)...
	for range 20 {
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 1000}})
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "authenticated telemetry scales down", func() bool {
		c, _ := container(s, "web", 1)
		return c.CPUQuotaUs < 150000
	})
	// ...and replaying it is dropped.
	stats0 := s.Stats().TelemetryStats
	mu.Lock()
	replay := append([][]byte(nil), sent...)
	mu.Unlock()
	for _, b := range replay {
		d.SendDatagram(b)
	}
	eventually(t, "replays counted", func() bool { return s.Stats().Dropped["replayed"] >= uint64(len(replay)) })
	if got := s.Stats().TelemetryStats; got != stats0 {
		t.Fatalf("replayed stats reached the allocator: %d -> %d", stats0, got)
	}
}

func TestCertsFilesAndRoles(t *testing.T) {
	dir := pki(t, "h1")
	for _, f := range []string{"ca.pem", "ca-key.pem", "controller.pem", "controller-key.pem", "h1.pem", "h1-key.pem"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, "-key.pem") && fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	// A daemon certificate cannot pose as the controller.
	sc, err := auth.ServerConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "h1"), Key: auth.KeyPath(dir, "h1")})
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, func(c *Config) { c.TLS = sc })
	_, err = simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("daemon accepted a daemon certificate as the controller's: %v", err)
	}
}

// Datagrams of a session that has just closed (a daemon reconnecting sends
// its last period as the session ends) are dropped as unknown_session, not
// reported as forged; a bad tag on an open session still counts as forged.
// The session's own telemetry socket closes with it.
func TestClosedSessionDatagramsAreNotForged(t *testing.T) {
	dir := pki(t, "h1")
	s := startTLS(t, dir)
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5}); err != nil {
		t.Fatal(err)
	}
	d, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent [][]byte
	d.Tap = func(b []byte) { mu.Lock(); sent = append(sent, b); mu.Unlock() }
	if err := d.Register(1, "web", -1, 0, 10*mib); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bootstrap", func() bool { c, ok := d.Container(1); return ok && c.QuotaUs > 0 })
	old := d.SessionID
	// The session's last period, captured; it is sent again after the close.
	mu.Lock()
	sent = nil
	mu.Unlock()
	d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 1000}})
	eventually(t, "the session's own telemetry socket", func() bool { return s.udp.Pins() == 1 })
	d.Close()
	eventually(t, "session closed", func() bool { return !s.Known(old) })
	eventually(t, "its telemetry socket closed", func() bool { return s.udp.Pins() == 0 })

	d2, err := simdaemon.DialTLS(s.TCPAddr(), "h1", 4, 8<<30, clientTLS(t, dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.Close)
	mu.Lock()
	late := append([][]byte(nil), sent...)
	mu.Unlock()
	if len(late) == 0 {
		t.Fatal("no datagram captured")
	}
	for _, b := range late {
		d2.SendDatagram(b) // the old session's datagrams, arriving late
	}
	eventually(t, "late datagrams dropped as unknown_session", func() bool {
		return s.Stats().Dropped[ingest.DropUnknownSession] >= uint64(len(late))
	})
	if n := s.Stats().Dropped[ingest.DropForged]; n != 0 {
		t.Fatalf("%d datagrams of a closed session reported as forged", n)
	}
	forger := wire.Batcher{SessionID: d2.SessionID, PeriodUs: 100000, MAC: wire.NewDatagramMAC([]byte("not the session key"))}
	forger.Add(&pb.CpuStat{Handle: 1, PeriodSeq: 5, QuotaUs: 200000, UsageUs: 1000}, d2.SendDatagram)
	forger.Flush(d2.SendDatagram)
	eventually(t, "bad tag on an open session counted as forged", func() bool { return s.Stats().Dropped[ingest.DropForged] == 1 })
}
