package auth

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// Both ends derive the same telemetry key from one TLS session; another
// session (or session id) gives another key; a host certificate names
// only its own host.
func TestTelemetryKeyAndPeerHost(t *testing.T) {
	dir := t.TempDir()
	if _, err := Generate(dir, []string{"h1"}, []string{"203.0.113.5", "ctl.example"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	sc, err := ServerConfig(Files{CA: CAPath(dir), Cert: CertPath(dir, "controller"), Key: KeyPath(dir, "controller")})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := ClientConfig(Files{CA: CAPath(dir), Cert: CertPath(dir, "h1"), Key: KeyPath(dir, "h1")}, "")
	if err != nil {
		t.Fatal(err)
	}
	dial := func() ([]byte, []byte, tls.ConnectionState) {
		a, b := net.Pipe()
		srv, cli := tls.Server(a, sc), tls.Client(b, cc)
		errc := make(chan error, 1)
		go func() { errc <- srv.Handshake() }()
		if err := cli.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		ks, err := TelemetryKey(srv.ConnectionState(), 7)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := TelemetryKey(cli.ConnectionState(), 7)
		if err != nil {
			t.Fatal(err)
		}
		return ks, kc, srv.ConnectionState()
	}
	ks, kc, st := dial()
	if !bytes.Equal(ks, kc) || len(ks) != 32 {
		t.Fatalf("keys differ or short: %x %x", ks, kc)
	}
	ks2, _, _ := dial()
	if bytes.Equal(ks, ks2) {
		t.Fatal("two sessions share a telemetry key")
	}
	if err := PeerHost(st, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := PeerHost(st, "h2"); err == nil {
		t.Fatal("h1's certificate accepted for h2")
	}
	if _, err := TelemetryKey(tls.ConnectionState{Version: tls.VersionTLS12}, 1); err == nil {
		t.Fatal("TLS 1.2 key derived")
	}
}

func TestGenerateRejectsBadNames(t *testing.T) {
	for _, hosts := range [][]string{{"../x"}, {"ca"}, {"controller"}, {""}} {
		if _, err := Generate(t.TempDir(), hosts, nil, time.Hour); err == nil {
			t.Fatalf("host %q accepted", hosts)
		}
	}
	if _, err := Generate(t.TempDir(), nil, []string{"bad name"}, time.Hour); err == nil {
		t.Fatal("bad controller name accepted")
	}
}

// A host certificate carries its app bindings; a bad binding is refused
// before anything is written.
func TestCertAppBindings(t *testing.T) {
	dir := t.TempDir()
	if _, err := GenerateBound(dir, []string{"h1"}, []string{"web", AnyApp}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, err := readCert(CertPath(dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := CertApps(c); len(got) != 2 || got[0] != "web" || got[1] != AnyApp {
		t.Fatalf("bound apps %v; want [web *]", got)
	}
	if _, err := GenerateBound(t.TempDir(), []string{"h2"}, []string{"a/b"}, nil, time.Hour); err == nil {
		t.Fatal("app a/b bound")
	}
}
