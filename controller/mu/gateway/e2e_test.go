package gateway_test

// Mu's acceptance path on the real engine: the real controller, a
// real escrad agent, the mu-fn image (queue proxy + demo-http) created
// through POST /v1/apps/{fn}/containers, requests through the gateway.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/workloadimages"
)

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func TestGatewayScalesRealReplicasThroughController(t *testing.T) {
	if testing.Short() {
		t.Skip("real engine: not in -short")
	}
	cli := dockertest.Client(t, "")
	if os.Geteuid() != 0 {
		t.Skip("needs root (escrad writes cgroups)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := &workloadimages.Builder{Docker: cli, RepoRoot: dockertest.RepoRoot()}
	img, err := b.Build(ctx, workloadimages.MuFunction)
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("mu-e2e-%d", rand.Intn(1_000_000))
	// Whatever happens, the test's containers go.
	t.Cleanup(func() {
		list, _ := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
		for _, c := range list.Items {
			cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		}
	})

	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	cfg.Logger = quiet()
	sctx, scancel := context.WithCancel(context.Background())
	s, err := server.Start(sctx, cfg)
	if err != nil {
		scancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { scancel(); s.Close() })
	// Budget: 1 core, 512 MiB; 0.25 cores per replica → ceiling 4.
	if err := s.DefineApp(server.AppSpec{Name: app, CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.2}); err != nil {
		t.Fatal(err)
	}
	dcli, err := containers.NewDockerClient("unix://" + dockertest.Socket)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{HostID: "mu-e2e", Controller: s.TCPAddr(), Period: 100 * time.Millisecond,
		OOMDeadline: time.Second, Heartbeat: 200 * time.Millisecond, Backend: agent.BackendCgroupfs,
		Docker: dcli, Log: quiet(), Apps: []string{app}})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	var awg sync.WaitGroup
	awg.Add(1)
	go func() { defer awg.Done(); _ = a.Run(actx) }()
	t.Cleanup(func() { acancel(); awg.Wait(); dcli.Close() })
	<-a.Started()

	cl, err := adminclient.New(s.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	sc := &gateway.ControllerScaler{Client: cl, Prefix: "mu-", BasePort: 21000 + 2*rand.Intn(10000), ProxyPath: "/escra-queue-proxy"}
	f := gateway.Function{Name: app, Image: img, CPUCores: 0.25, MemoryBytes: 64 << 20, Concurrency: 2, MaxQueue: 50,
		SLO: 2 * time.Second, Autoscaler: mu.ASMuNoPred, LB: mu.LBMu, Grace: 3,
		Command: []string{"/demo-http", "-listen", "127.0.0.1:{port}"}}
	g, err := gateway.New([]gateway.Function{f}, sc, quiet())
	if err != nil {
		t.Fatal(err)
	}
	var serving atomic.Pointer[gateway.Gateway] // the gateway the front calls
	serving.Store(g)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serving.Load().ServeHTTP(w, r) }))
	defer front.Close()
	gctx, gcancel := context.WithCancel(context.Background())
	gdone := make(chan struct{})
	go func() { g.Run(gctx); close(gdone) }()
	crash := func() { // the gateway stops without removing its replicas
		gcancel()
		<-gdone
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			crash()
			if err := g.Shutdown(context.Background()); err != nil {
				t.Errorf("gateway shutdown: %v", err)
			}
		}
	}
	defer stop()

	// Scale from zero: the first request is held until the replica runs.
	resp, err := http.Get(front.URL + "/fn/" + app + "/cpu?ms=5")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	for h := range resp.Header {
		if strings.HasPrefix(h, "X-Mu-") {
			t.Fatalf("client saw piggybacked header %s", h)
		}
	}
	members := func() int {
		n := 0
		for _, c := range s.Snapshot().Containers {
			if c.App == app {
				n++
			}
		}
		return n
	}
	if m := members(); m != 1 {
		t.Fatalf("after the first request the app's Distributed Container has %d members, want 1", m)
	}

	// Closed-loop load of 40 ms requests from 8 clients: one replica at
	// concurrency 2 queues, so Mu scales out, within the ceiling of 4.
	lstop := make(chan struct{})
	var wg sync.WaitGroup
	var codes sync.Map
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-lstop:
					return
				default:
				}
				r, err := http.Get(front.URL + "/fn/" + app + "/cpu?ms=40")
				if err != nil {
					continue
				}
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				v, _ := codes.LoadOrStore(r.StatusCode, new(int))
				_ = v
			}
		}()
	}
	deadline := time.Now().Add(90 * time.Second)
	peak := 0
	for time.Now().Before(deadline) {
		st := g.Statuses()[0]
		peak = max(peak, st.Ready)
		if st.Ready >= 2 && members() >= 2 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(lstop)
	wg.Wait()
	st := g.Statuses()[0]
	t.Logf("under load: %+v", st)
	if peak < 2 {
		t.Fatalf("no scale-out under load: peak %d ready replicas (%+v)", peak, st)
	}
	if st.Ceiling != 4 || st.Ready+st.Pending > 4 {
		t.Fatalf("ceiling %d (want 4 = 1 core / 0.25), %d replicas", st.Ceiling, st.Ready+st.Pending)
	}
	if st.CapacityRPS <= 0 {
		t.Fatalf("no capacity estimate from the piggybacked metrics: %+v", st)
	}

	// The gateway crashes; a new one with the same settings takes over the
	// running replicas: it serves at once, and creates no container.
	crash()
	onEngine := func() int {
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	before := onEngine()
	served := g.Statuses()[0].Ready // what the crashed gateway was serving with
	sc2 := &gateway.ControllerScaler{Client: cl, Prefix: sc.Prefix, BasePort: sc.BasePort, ProxyPath: sc.ProxyPath}
	g2, err := gateway.New([]gateway.Function{f}, sc2, quiet())
	if err != nil {
		t.Fatal(err)
	}
	g = g2 // stop() shuts the new one down
	g2ctx, g2cancel := context.WithCancel(context.Background())
	defer g2cancel()
	gcancel, gdone = g2cancel, make(chan struct{})
	if err := g2.Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { g2.Run(g2ctx); close(gdone) }()
	// What can be adopted is what still runs on the engine: a replica the
	// crashed gateway counted may have exited since (on a loaded machine
	// the newest one sometimes had, 2 ready and 1 running).
	if st := g2.Statuses()[0]; st.Ready != before || before == 0 || before > served {
		t.Fatalf("the restarted gateway adopted %d replicas, %d run on the engine (the crashed one served with %d): %+v", st.Ready, before, served, st)
	}
	serving.Store(g2)
	resp, err = http.Get(front.URL + "/fn/" + app + "/cpu?ms=5")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := onEngine(); resp.StatusCode != 200 || n > before {
		t.Fatalf("after the restart: status %d, %d replicas on the engine (were %d): the new gateway created some", resp.StatusCode, n, before)
	}
	stop()
	// Shutdown removed every replica through the controller.
	deadline = time.Now().Add(20 * time.Second)
	for members() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	list, _ := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
	if len(list.Items) != 0 || members() != 0 {
		t.Fatalf("after shutdown: %d containers on the engine, %d members", len(list.Items), members())
	}
}
