package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// certs --user issues one operator's certificate from the existing CA: CN
// the user's name, the role's OU, client auth only, 30 days by default,
// nothing else rewritten; without a CA, with a host's name, or with a bad
// role it is one error line and nothing is written.
func TestCertsUser(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "certs", "--dir", dir, "--hosts", "h1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	ctl1, _ := os.ReadFile(auth.CertPath(dir, "controller"))
	r := runCLI(t, "certs", "--dir", dir, "--user", "alice", "--role", "admin")
	if r.code != 0 || r.stdout != auth.CertPath(dir, "alice")+"\n"+auth.KeyPath(dir, "alice")+"\n" {
		t.Fatalf("%+v", r)
	}
	if ctl2, _ := os.ReadFile(auth.CertPath(dir, "controller")); !bytes.Equal(ctl1, ctl2) {
		t.Fatal("--user reissued the controller's certificate")
	}
	pair, err := tls.LoadX509KeyPair(auth.CertPath(dir, "alice"), auth.KeyPath(dir, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	if leaf.Subject.CommonName != "alice" || strings.Join(leaf.Subject.OrganizationalUnit, ",") != "escra-admin" {
		t.Fatalf("subject %v", leaf.Subject)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("key usage %v", leaf.ExtKeyUsage)
	}
	if left := time.Until(leaf.NotAfter); left < 29*24*time.Hour || left > 31*24*time.Hour {
		t.Fatalf("valid for %v, want 30 days", left)
	}
	if st, err := os.Stat(auth.KeyPath(dir, "alice")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", st, err)
	}
	if r := runCLI(t, "certs", "--dir", dir, "--user", "bob", "--days", "3"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	bob, _ := tls.LoadX509KeyPair(auth.CertPath(dir, "bob"), auth.KeyPath(dir, "bob"))
	if ou := strings.Join(bob.Leaf.Subject.OrganizationalUnit, ","); ou != "escra-viewer" || time.Until(bob.Leaf.NotAfter) > 3*24*time.Hour {
		t.Fatalf("bob: OU %s, until %v; want a 3-day viewer", ou, bob.Leaf.NotAfter)
	}
	h1, _ := os.ReadFile(auth.CertPath(dir, "h1"))
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dir", empty, "--user", "carol"}, 1, "escractl: certs: no CA in " + empty},
		{[]string{"--dir", dir, "--user", "h1", "--role", "admin"}, 1, "escractl: certs: " + auth.CertPath(dir, "h1") + " holds a host's certificate"},
		{[]string{"--dir", dir, "--hosts", "alice"}, 1, "escractl: certs: " + auth.CertPath(dir, "alice") + " holds an operator's certificate"},
		{[]string{"--dir", dir, "--user", "carol", "--role", "root"}, 2, `escractl: certs: --role "root": want admin, viewer or scaler`},
		{[]string{"--dir", dir, "--user", "admin"}, 1, `escractl: certs: user name "admin"`},
		{[]string{"--dir", dir, "--user", "carol", "--hosts", "h2"}, 2, "escractl: certs: --user issues one operator's certificate"},
		{[]string{"--dir", dir, "--role", "admin"}, 2, "escractl: certs: --role goes with --user"},
	} {
		r := runCLI(t, append([]string{"certs"}, tc.args...)...)
		if r.code != tc.code || !strings.HasPrefix(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d %q; want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(auth.CertPath(empty, "carol")); err == nil {
		t.Fatal("a user certificate was written without a CA")
	}
	if _, err := os.Stat(auth.CertPath(dir, "carol")); err == nil {
		t.Fatal("carol's certificate was written by a refused command")
	}
	if h1b, _ := os.ReadFile(auth.CertPath(dir, "h1")); !bytes.Equal(h1, h1b) {
		t.Fatal("a user certificate replaced host h1's")
	}
}

// Leaf certificates live 30 days by default, the CA 10 years.
func TestCertsDefaultLifetimes(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "certs", "--dir", dir, "--hosts", "h1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	for _, name := range []string{"controller", "h1", "admin", "viewer", "scaler"} {
		pair, err := tls.LoadX509KeyPair(auth.CertPath(dir, name), auth.KeyPath(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(pair.Leaf.NotAfter); left < 29*24*time.Hour || left > 31*24*time.Hour {
			t.Errorf("%s valid for %v, want 30 days", name, left)
		}
	}
	b, _ := os.ReadFile(auth.CAPath(dir))
	blk, _ := pem.Decode(b)
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(ca.NotAfter); left < 9*365*24*time.Hour {
		t.Errorf("CA valid for %v, want 10 years", left)
	}
}
