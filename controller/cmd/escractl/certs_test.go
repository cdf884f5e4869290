package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/internal/auth"
)

// escractl certs lays out the files, reuses the CA on a second run, and the
// certificates it issues complete a mutual TLS 1.3 handshake.
func TestCertsIssuesWorkingMutualTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "escra")
	r := runCLI(t, "certs", "--dir", dir, "--hosts", "h1")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(dir, "h1-key.pem")) {
		t.Fatalf("%+v", r)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if r := runCLI(t, "certs", "--dir", dir, "--hosts", "h2"); r.code != 0 || strings.Contains(r.stdout, "ca.pem") {
		t.Fatalf("second run: %+v", r)
	}
	if ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(ca1, ca2) {
		t.Fatal("second run replaced the CA (h1's certificate would stop working)")
	}
	sc, err := auth.ServerConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	for _, h := range []string{"h1", "h2"} {
		cc, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, h), Key: auth.KeyPath(dir, h)}, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), cc)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("TLS version %x", v)
		}
		if err := auth.PeerHost(tls.ConnectionState{VerifiedChains: c.ConnectionState().VerifiedChains}, auth.ControllerName); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// A client without a certificate is refused.
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: auth.ControllerName, InsecureSkipVerify: true})
	if err == nil {
		buf := make([]byte, 2)
		_, err = c.Read(buf)
		c.Close()
	}
	if err == nil {
		t.Fatal("client without a certificate got through")
	}
}

// certs --apps binds the host certificates to those apps; a bad app name
// is one error line and exit 1, with nothing written.
func TestCertsBindApps(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "certs", "--dir", dir, "--hosts", "h1", "--apps", "web, db"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	pair, err := tls.LoadX509KeyPair(auth.CertPath(dir, "h1"), auth.KeyPath(dir, "h1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := auth.CertApps(pair.Leaf); strings.Join(got, ",") != "web,db" {
		t.Fatalf("h1 bound to %v; want web, db", got)
	}
	bad := t.TempDir()
	r := runCLI(t, "certs", "--dir", bad, "--hosts", "h2", "--apps", "a/b")
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, `app "a/b"`) {
		t.Fatalf("bad app: %+v", r)
	}
	if _, err := os.Stat(auth.CertPath(bad, "h2")); err == nil {
		t.Fatal("a certificate was written for a bad binding")
	}
}
