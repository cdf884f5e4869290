package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/auth"
)

// Without certificates and without --insecure the controller refuses to
// start, with one line that says what to do.
func TestRefusesToStartWithoutCertificates(t *testing.T) {
	var stderr strings.Builder
	code := run([]string{"--tls-ca", "/nonexistent/ca.pem", "--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0",
		"--admin-listen", ""}, &stderr)
	if code != 2 || strings.Count(stderr.String(), "\n") != 1 ||
		!strings.Contains(stderr.String(), "escractl certs") || !strings.Contains(stderr.String(), "--insecure") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// Under the shipped unit the key arrives through LoadCredential=: with the
// files in $CREDENTIALS_DIRECTORY the controller starts from them, and the
// unit's SetCredential= fallback (where /etc/escra lacked the file) sends it
// to the /etc/escra path, so the error names the file the operator must
// create.
func TestCertificatesFromCredentials(t *testing.T) {
	src := t.TempDir()
	if _, err := auth.Generate(src, []string{"node1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	for _, f := range []string{"ca.pem", "controller.pem", "controller-key.pem"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(creds, f), b, 0o400)
	}
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	var stderr strings.Builder
	if rc := run([]string{"--check-config", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--telemetry-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &stderr); rc != 0 {
		t.Fatalf("--check-config with the certificates as credentials: exit %d: %s", rc, stderr.String())
	}
	os.Chmod(filepath.Join(creds, "controller-key.pem"), 0o600)
	os.WriteFile(filepath.Join(creds, "controller-key.pem"), []byte("not a key"), 0o600)
	stderr.Reset()
	if rc := run([]string{"--check-config", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--telemetry-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &stderr); rc == 0 ||
		!strings.Contains(stderr.String(), filepath.Join(creds, "controller-key.pem")) {
		t.Errorf("a bad key credential: exit %d: %s", rc, stderr.String())
	}
	os.Chmod(filepath.Join(creds, "ca.pem"), 0o600)
	os.WriteFile(filepath.Join(creds, "ca.pem"), []byte(credentialAbsent), 0o600)
	if got := credential(auth.CAPath); got != "/etc/escra/ca.pem" {
		t.Errorf("the unit's fallback ca.pem credential gives %s, want /etc/escra/ca.pem", got)
	}
	if got := credential(func(d string) string { return auth.KeyPath(d, "controller") }); got != filepath.Join(creds, "controller-key.pem") {
		t.Errorf("the key credential gives %s", got)
	}
}

// --tls-deny is read with the certificates: a good list passes
// --check-config, a bad line, a missing file, --insecure and a negative
// --tls-reload-every are one line and exit 2.
func TestTLSDenyFlag(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Generate(dir, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	good, bad := filepath.Join(dir, "deny"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("# lost laptops\n0a:1b:2c\n"), 0o644)
	os.WriteFile(bad, []byte("0a1b\nnot-hex\n"), 0o644)
	tlsArgs := []string{"--check-config", "--state-dir", dir, "--tls-ca", auth.CAPath(dir), "--tls-cert", auth.CertPath(dir, "controller"), "--tls-key", auth.KeyPath(dir, "controller")}
	var e strings.Builder
	if rc := run(append(tlsArgs, "--tls-deny", good), &e); rc != 0 {
		t.Fatalf("good deny-list: exit %d: %s", rc, e.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(tlsArgs, "--tls-deny", bad), "line 2"},
		{append(tlsArgs, "--tls-deny", filepath.Join(dir, "none")), "deny-list"},
		{[]string{"--check-config", "--insecure", "--state-dir", dir, "--tls-deny", good}, "--tls-deny needs TLS"},
		{append(tlsArgs, "--tls-reload-every", "-1s"), "--tls-reload-every"},
	} {
		e.Reset()
		if rc := run(tc.args, &e); rc != 2 || strings.Count(e.String(), "\n") != 1 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args[len(tc.args)-2:], rc, e.String(), tc.want)
		}
	}
}

// The real binary takes new files without a restart: with
// --tls-reload-every 0 only on SIGHUP (the served serial stays until the
// signal, then changes, same pid); with a poll, by itself.
func TestReloadsCertificateWithoutRestart(t *testing.T) {
	bin := buildController(t)
	dir := t.TempDir()
	if _, err := auth.Generate(dir, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	served := func(admin string) string {
		t.Helper()
		cc, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "admin"), Key: auth.KeyPath(dir, "admin")}, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", admin, cc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	}
	onFile := func() string {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(auth.CertPath(dir, "controller"), auth.KeyPath(dir, "controller"))
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf.SerialNumber.Text(16)
	}
	waitServed := func(admin, want string) bool {
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if served(admin) == want {
				return true
			}
		}
		return false
	}
	args := func(every string) []string {
		return []string{"--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
			"--state-dir", t.TempDir(), "--tls-ca", auth.CAPath(dir), "--tls-cert", auth.CertPath(dir, "controller"),
			"--tls-key", auth.KeyPath(dir, "controller"), "--tls-reload-every", every}
	}
	cmd, _, admin := startController(t, bin, args("0")...)
	first := served(admin)
	if _, err := auth.Generate(dir, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	second := onFile()
	time.Sleep(300 * time.Millisecond)
	if got := served(admin); got != first {
		t.Fatalf("reloaded without SIGHUP under --tls-reload-every 0: %s", got)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !waitServed(admin, second) {
		t.Fatalf("after SIGHUP still %s, want %s", served(admin), second)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the controller is gone after SIGHUP: %v", err)
	}
	_, _, admin2 := startController(t, bin, args("50ms")...)
	if _, err := auth.Generate(dir, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if third := onFile(); !waitServed(admin2, third) {
		t.Fatalf("the poll never loaded %s", third)
	}
}
