package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/link"
	"github.com/escra-dev/escra/internal/etcdtest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// host is a daemon's side of the link with one container (escrad's link
// package, its handler reduced to recording what it is told).
type host struct {
	mu   sync.Mutex
	sets int
}

func (h *host) SetLimits(_ time.Time, m *pb.SetLimits) *pb.SetLimitsAck {
	h.mu.Lock()
	h.sets++
	h.mu.Unlock()
	ack := &pb.SetLimitsAck{}
	for _, u := range m.Updates {
		ack.Applied = append(ack.Applied, &pb.SetLimitsAck_Applied{Handle: u.Handle, Generation: u.Generation, AppliedUnixNs: time.Now().UnixNano()})
	}
	return ack
}
func (h *host) Reclaim(*pb.ReclaimRequest) *pb.ReclaimResult { return &pb.ReclaimResult{} }
func (h *host) Registrations() []*pb.ContainerRegister {
	return []*pb.ContainerRegister{{Handle: 1, ContainerId: "c1", Name: "c1", App: "web",
		Limits: &pb.Limits{CpuQuotaUs: 100000, CpuPeriodUs: 100000, MemoryLimitBytes: 256 << 20}, MemoryUsageBytes: 10 << 20}}
}
func (h *host) MemoryUsage() *pb.MemoryUsage { return nil }

var noRedirect = &http.Client{Timeout: 5 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func adminGet(t *testing.T, admin, path string, v any) int {
	t.Helper()
	resp, err := noRedirect.Get("http://" + admin + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == 200 {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// Two controllers on one real etcd: the first leads, the second follows
// (its admin API redirects to the leader's, its session port sends
// daemons to the leader). The leader is SIGKILLed: the follower takes
// over with the stored budget, and the daemon, given both addresses,
// reconnects to it with a higher term.
func TestFailoverToFollower(t *testing.T) {
	e := etcdtest.Start(t)
	bin := buildController(t)
	args := []string{"--insecure", "--insecure-store", "--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--reclaim-every", "0", "--store", e.URL(), "--leader-ttl", "2s"}
	eventually := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		for !cond() {
			if time.Since(t0) > within {
				t.Fatalf("timed out after %v waiting for %s", within, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(t0)
	}
	a, aSess, aAdmin := startController(t, bin, args...)
	eventually("the first controller to lead", 10*time.Second, func() bool { return adminGet(t, aAdmin, "/v1/apps", nil) == 200 })
	b, bSess, bAdmin := startController(t, bin, args...)

	// An operator's budget, on the leader.
	req, _ := http.NewRequest("PUT", "http://"+aAdmin+"/v1/apps/web", strings.NewReader(`{"name":"web","cpu_cores":2,"memory_bytes":1073741824,"sigma":0.5}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT on the leader: %v %v", resp, err)
	}
	// The follower redirects admin calls to the leader.
	resp, err := noRedirect.Get("http://" + bAdmin + "/v1/apps")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 307 || resp.Header.Get("Location") != "http://"+aAdmin+"/v1/apps" {
		t.Fatalf("follower's answer: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// escractl's client pointed at the follower: the write lands on the leader.
	ac, err := adminclient.New("http://" + bAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.PutApp(context.Background(), adminclient.AppBudget{Name: "db", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatalf("PUT through the follower: %v", err)
	}
	if err := ac.DeleteApp(context.Background(), "db"); err != nil {
		t.Fatalf("DELETE through the follower: %v", err)
	}

	// The daemon knows both; it is given the follower first.
	h := &host{}
	c := link.New(link.Config{Addrs: []string{bSess, aSess}, Heartbeat: 200 * time.Millisecond, DeadAfter: time.Second,
		Hello: &pb.HostHello{HostId: "h1", Cores: 2, MemoryBytes: 8 << 30}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	eventually("a session with the leader", 10*time.Second, func() bool { return c.Addr() == aSess })
	member := func(admin string) bool {
		var cs []server.ContainerState
		return adminGet(t, admin, "/v1/containers", &cs) == 200 && len(cs) == 1 && cs[0].ContainerID == "c1" && cs[0].CPUQuotaUs > 0
	}
	eventually("the container on the leader", 5*time.Second, func() bool { return member(aAdmin) })
	termA := c.Term()
	if termA == 0 {
		t.Fatal("the leader's session carries no term")
	}

	// SIGKILL the leader.
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	eventually("the follower to lead and hold the daemon's container", 20*time.Second, func() bool {
		return c.Addr() == bSess && member(bAdmin)
	})
	failover := time.Since(t0)
	var apps []server.AppState
	if adminGet(t, bAdmin, "/v1/apps", &apps) != 200 || len(apps) != 1 || apps[0].CPUCores != 2 || apps[0].Auto {
		t.Fatalf("budget after failover: %+v", apps)
	}
	if c.Term() <= termA {
		t.Fatalf("term %d after failover, %d before: terms must grow", c.Term(), termA)
	}
	t.Logf("failover: leader SIGKILLed → follower leads with the stored budget and the daemon's container in %.2f s (leader TTL 2 s; terms %d → %d)",
		failover.Seconds(), termA, c.Term())
	if failover > 10*time.Second {
		t.Fatalf("failover took %v", failover)
	}

	// A leader stopped with SIGTERM resigns: its successor (one the daemon
	// does not know, so only its admin API is watched) need not wait for
	// the lease to expire.
	_, _, cAdmin := startController(t, bin, args...)
	if adminGet(t, cAdmin, "/v1/apps", nil) != 307 {
		t.Fatal("the third controller is not following")
	}
	if err := b.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	eventually("the third controller to lead after a SIGTERM", 10*time.Second, func() bool {
		return adminGet(t, cAdmin, "/v1/apps", nil) == 200
	})
	handover := time.Since(t0)
	t.Logf("handover after SIGTERM of the leader: %.2f s", handover.Seconds())
	if handover >= 2*time.Second {
		t.Fatalf("handover after SIGTERM took %v: the leader did not resign", handover)
	}
}
