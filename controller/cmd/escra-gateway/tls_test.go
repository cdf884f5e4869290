package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/auth"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// The gateway against a controller whose admin API is mutual TLS (no
// --insecure): with scaler.pem from escractl certs it reads the apps and
// its scale-out calls reach the controller's handler (which refuses them
// only for want of a host, 409), while a viewer's certificate is refused
// (403) and no certificate at all is one clear error. Then the command
// itself starts, serves /v1/functions and stops on cancel.
func TestGatewayAgainstTLSController(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := auth.Generate(dir, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	files := auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")}
	sc, err := auth.ServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := auth.AdminServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLS, cfg.AdminTLS = sc, ac
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.DefineApp(server.AppSpec{Name: "fn-a", CPUCores: 1, MemoryBytes: 1 << 30, Sigma: 0.2}); err != nil {
		t.Fatal(err)
	}
	url := "https://" + srv.AdminAddr()
	one := []adminclient.DeployContainer{{Name: "mu-fn-a-1", Image: "img", CPUCores: 0.1, MemoryBytes: 64 << 20}}

	cl, err := controllerClient(url, dir, auth.RoleScaler)
	if err != nil {
		t.Fatal(err)
	}
	if apps, err := cl.Apps(ctx); err != nil || len(apps) != 1 || apps[0].Name != "fn-a" {
		t.Fatalf("scaler reading apps: %+v, %v", apps, err)
	}
	var ae *adminclient.APIError
	if _, err := cl.ScaleOut(ctx, "fn-a", one); !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Fatalf("scaler scale-out with no host: %v, want the handler's 409", err)
	}
	if err := cl.DeleteApp(ctx, "fn-a"); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("scaler deleting the app: %v, want 403", err)
	}
	viewer, err := controllerClient(url, dir, auth.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.ScaleOut(ctx, "fn-a", one); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("viewer scale-out: %v, want 403", err)
	}
	if _, err := controllerClient(url, t.TempDir(), auth.RoleScaler); err == nil || !strings.Contains(err.Error(), "escractl certs") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no certificate: %v, want one line naming escractl certs", err)
	}

	fns := filepath.Join(t.TempDir(), "functions.json")
	os.WriteFile(fns, []byte(`[{"name":"fn-a","image":"img","cpu_cores":0.1,"memory_bytes":67108864,"concurrency":2,"max_queue":10,"slo":"1s","autoscaler":"mu","lb":"p2c","grace":4}]`), 0o644)
	listen, admin := freeAddr(t), freeAddr(t)
	gctx, gcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(gctx, []string{"-controller", url, "-certs", dir, "-config", fns, "-listen", listen, "-admin", admin})
	}()
	var body string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + admin + "/v1/functions"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(b); resp.StatusCode == 200 && strings.Contains(body, "fn-a") {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway's /v1/functions never listed fn-a: %q", body)
		}
	}
	gcancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gateway stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not stop on cancel")
	}
}
