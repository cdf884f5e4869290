package main

import (
	"os"
	"path/filepath"
	"strings"
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
