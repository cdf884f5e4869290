package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/auth"
)

// escractl against a controller with the secure defaults: the files of
// escractl certs are all it needs; a viewer reads but cannot delete;
// without a certificate it says how to get one, in one line.
func TestCLIWithOperatorCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if r := runCLI(t, "certs", "--dir", dir, "--hosts", "h1"); r.code != 0 ||
		!strings.Contains(r.stdout, "admin.pem") || !strings.Contains(r.stdout, "viewer.pem") {
		t.Fatalf("certs: %+v", r)
	}
	files := auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")}
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	if cfg.TLS, err = auth.ServerConfig(files); err != nil {
		t.Fatal(err)
	}
	if cfg.AdminTLS, err = auth.AdminServerConfig(files); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "https://" + s.AdminAddr()
	if r := runCLI(t, "--controller", url, "--certs", dir, "apply", "--budget-only", "-f", "../../../docs/examples/minimal.yaml"); r.code != 0 {
		t.Fatalf("apply with admin.pem: %s", r.stderr)
	}
	if r := runCLI(t, "--controller", url, "--certs", dir, "get", "apps"); r.code != 0 || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("get apps: %+v", r)
	}
	// A viewer-only directory: reads, and is refused a delete.
	vdir := t.TempDir()
	for _, f := range []string{"ca.pem", "viewer.pem", "viewer-key.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := runCLI(t, "--controller", url, "--certs", vdir, "get", "apps"); r.code != 0 {
		t.Fatalf("viewer get apps: %+v", r)
	}
	if r := runCLI(t, "--controller", url, "--certs", vdir, "delete", "hello"); r.code == 0 || !strings.Contains(r.stderr, "role viewer may not") {
		t.Fatalf("viewer delete: %+v", r)
	}
	if len(s.Snapshot().Apps) != 1 {
		t.Fatal("the viewer's delete removed the app")
	}
	if r := runCLI(t, "--controller", url, "--certs", t.TempDir(), "get", "apps"); r.code != 1 || !strings.Contains(r.stderr, "escractl certs") {
		t.Fatalf("no certificate: %+v", r)
	}
	// Contexts carry the certificate: a certs directory, or the three
	// files; the viewer's context cannot delete, the admin's can read.
	t.Setenv("ESCRACONFIG", filepath.Join(t.TempDir(), "config.yaml"))
	t.Setenv("ESCRA_CERTS", "")
	if r := runCLI(t, "config", "set-context", "admin", "--controller", url, "--certs", dir); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI(t, "config", "set-context", "viewer", "--controller", url, "--tls-ca", auth.CAPath(dir),
		"--tls-cert", auth.CertPath(dir, "viewer"), "--tls-key", auth.KeyPath(dir, "viewer")); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI(t, "config", "use-context", "viewer"); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI(t, "get", "apps"); r.code != 0 || !strings.Contains(r.stdout, "hello") {
		t.Fatalf("get apps through the viewer context: %+v", r)
	}
	if r := runCLI(t, "delete", "hello", "--dry-run=server"); r.code == 0 || !strings.Contains(r.stderr, "role viewer may not") {
		t.Fatalf("viewer context's server dry-run delete: %+v", r)
	}
	if r := runCLI(t, "--context", "admin", "delete", "hello", "--dry-run=server"); r.code != 0 {
		t.Fatalf("admin context's server dry-run delete: %+v", r)
	}
	// A plain URL against the HTTPS API fails in one line too.
	if r := runCLI(t, "--controller", "http://"+s.AdminAddr(), "get", "apps"); r.code == 0 {
		t.Fatalf("plain HTTP to the HTTPS admin API: %+v", r)
	}
}
