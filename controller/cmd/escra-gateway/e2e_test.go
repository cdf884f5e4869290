package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/workloadimages"
)

// The packaged path on the real engine, with no --insecure anywhere: a
// controller with mutual TLS on the daemon channel and the admin API, a
// real escrad agent with its host certificate, and the escra-gateway
// command with scaler.pem. The gateway starts its initial replica through
// the controller, serves a request on it, and removes it when stopped.
func TestGatewayCommandScalesRealReplicasOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("real engine: not in -short")
	}
	cli := dockertest.Client(t, "")
	if os.Geteuid() != 0 {
		t.Skip("needs root (escrad writes cgroups)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	img, err := (&workloadimages.Builder{Docker: cli, RepoRoot: dockertest.RepoRoot()}).Build(ctx, workloadimages.MuFunction)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("mu-tls-%d", rand.Intn(1_000_000))
	listApp := func() []container.Summary {
		l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
		if err != nil {
			return nil
		}
		return l.Items
	}
	t.Cleanup(func() {
		for _, c := range listApp() {
			_, _ = cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		}
	})

	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := auth.GenerateBound(dir, []string{"h1"}, []string{auth.AnyApp}, nil, time.Hour); err != nil {
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
	hostTLS, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "h1"), Key: auth.KeyPath(dir, "h1")}, "")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLS, cfg.AdminTLS, cfg.ReclaimEvery, cfg.Logger = sc, ac, 0, quiet
	sctx, scancel := context.WithCancel(context.Background())
	s, err := server.Start(sctx, cfg)
	if err != nil {
		scancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { scancel(); s.Close() })
	if err := s.DefineApp(server.AppSpec{Name: app, CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.2}); err != nil {
		t.Fatal(err)
	}
	dcli, err := containers.NewDockerClient("unix://" + dockertest.Socket)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{HostID: "h1", Controller: s.TCPAddr(), TLS: hostTLS, Period: 100 * time.Millisecond,
		OOMDeadline: time.Second, Heartbeat: 200 * time.Millisecond, Backend: agent.BackendCgroupfs,
		Docker: dcli, Log: quiet, Apps: []string{app}})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	var awg sync.WaitGroup
	awg.Add(1)
	go func() { defer awg.Done(); _ = a.Run(actx) }()
	t.Cleanup(func() { acancel(); awg.Wait(); dcli.Close() })
	<-a.Started()
	admin, err := adminclient.NewTLS(s.AdminAddr(), mustTLS(t, dir, auth.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if hs, err := admin.Hosts(ctx); err == nil && len(hs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never joined over TLS")
		}
	}

	fns := filepath.Join(t.TempDir(), "functions.json")
	os.WriteFile(fns, []byte(fmt.Sprintf(`[{"name":%q,"image":%q,"cpu_cores":0.25,"memory_bytes":67108864,"concurrency":2,"max_queue":20,
		"slo":"2s","autoscaler":"mu","lb":"mu","grace":3,"initial_scale":1,"command":["/demo-http","-listen","127.0.0.1:{port}"]}]`, app, img)), 0o644)
	listen, gwAdmin := freeAddr(t), freeAddr(t)
	gctx, gcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(gctx, []string{"-controller", "https://" + s.AdminAddr(), "-certs", dir, "-config", fns,
			"-listen", listen, "-admin", gwAdmin, "-base-port", fmt.Sprint(30000 + 2*rand.Intn(5000))})
	}()
	var code int
	for deadline := time.Now().Add(90 * time.Second); code != 200; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get("http://" + listen + "/fn/" + app + "/cpu?ms=5"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		}
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 200 through the gateway within 90 s (last %d)", code)
		}
	}
	// The replica joins the app's Distributed Container once escrad
	// reports it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cs, err := admin.Containers(ctx, app)
		if err == nil && len(cs) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the controller has %d containers of %s (%v); want the gateway's replica", len(cs), app, err)
		}
	}
	if n := len(listApp()); n < 1 {
		t.Fatalf("%d containers of %s on the engine", n, app)
	}
	gcancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gateway stopped with %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("gateway did not stop")
	}
	for deadline := time.Now().Add(30 * time.Second); len(listApp()) > 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas left after the gateway stopped", len(listApp()))
		}
	}
}

func mustTLS(t *testing.T, dir, role string) *tls.Config {
	t.Helper()
	tc, err := adminclient.OperatorTLS(dir, role)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
