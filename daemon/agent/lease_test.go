package agent

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Host-local leases: with no credit a throttle event goes to
// the controller; with credit the quota is raised at once, the use is
// reported and the event is not forwarded; a revoke returns what is left;
// the credit dies with the session. The test is the source: it feeds the
// agent throttle events itself (the sampler is not running), so nothing
// else writes to the link's telemetry batcher.
func TestLeaseCreditAnswersThrottleEvents(t *testing.T) {
	rel := cgtest.New(t, "agent-lease")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "100000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "10000")
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	a, err := New(Config{Controller: p.Addr(), Backend: BackendCgroupfs, Heartbeat: 100 * time.Millisecond,
		Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.link.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	a.add(containers.Container{ID: "cgroup:" + rel, Name: "vm1", App: "vms", CgroupPath: rel})
	reg := p.WaitRegistered("cgroup:"+rel, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	h := reg.Handle
	quota := func() int64 {
		v, _ := strconv.ParseInt(strings.TrimSpace(cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us")), 10, 64)
		return v
	}
	event := func() {
		a.CPU(&pb.CpuStat{Handle: h, PeriodSeq: 1, QuotaUs: quota(), MidPeriod: true})
		a.Flush()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	// No credit: forwarded, quota unchanged.
	event()
	waitFor("the forwarded throttle event", func() bool { return p.MidPeriod.Load() == 1 })
	if q := quota(); q != 10000 {
		t.Fatalf("quota %d without credit, want 10000", q)
	}

	// Credit: raised by min(credit, max(quota, credit/2)) = 20,000 µs at once.
	if err := p.Lease(&pb.CpuLease{App: "vms", LeaseId: 7, AddUs: 40000}); err != nil {
		t.Fatal(err)
	}
	waitFor("the grant", func() bool { id, us := a.LeaseCredit("vms"); return id == 7 && us == 40000 })
	event()
	if q := quota(); q != 30000 {
		t.Fatalf("quota %d after a lease raise, want 30000", q)
	}
	waitFor("the use", func() bool { u, _ := p.LeaseMessages(); return len(u) == 1 })
	u, _ := p.LeaseMessages()
	if u[0].App != "vms" || u[0].LeaseId != 7 || u[0].Handle != h || u[0].AmountUs != 20000 || u[0].QuotaUs != 30000 {
		t.Fatalf("use %v", u[0])
	}
	time.Sleep(50 * time.Millisecond)
	if n := p.MidPeriod.Load(); n != 1 {
		t.Fatalf("%d throttle events forwarded, want the covered one kept local", n)
	}
	// The controller's answer (a newer generation) is applied, not stale.
	ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: h, Generation: 1, Limits: &pb.Limits{CpuQuotaUs: 30000, CpuPeriodUs: 100000}})
	if err != nil || ack.Applied[0].Error != "" {
		t.Fatalf("answer to the use: %v %v", ack, err)
	}

	// Revoke: what is left comes back; an old id gets 0.
	if err := p.Lease(&pb.CpuLease{App: "vms", LeaseId: 3, Revoke: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.Lease(&pb.CpuLease{App: "vms", LeaseId: 7, Revoke: true}); err != nil {
		t.Fatal(err)
	}
	waitFor("the returns", func() bool { _, r := p.LeaseMessages(); return len(r) == 2 })
	_, r := p.LeaseMessages()
	if r[0].LeaseId != 3 || r[0].RemainingUs != 0 || r[1].LeaseId != 7 || r[1].RemainingUs != 20000 {
		t.Fatalf("returns %v", r)
	}
	if _, us := a.LeaseCredit("vms"); us != 0 {
		t.Fatalf("credit %d after the return", us)
	}
	event() // no credit again: forwarded
	waitFor("the second forwarded event", func() bool { return p.MidPeriod.Load() == 2 })

	// A session that ends takes the credit with it.
	if err := p.Lease(&pb.CpuLease{App: "vms", LeaseId: 9, AddUs: 5000}); err != nil {
		t.Fatal(err)
	}
	waitFor("the second grant", func() bool { id, _ := a.LeaseCredit("vms"); return id == 9 })
	p.Kick()
	waitFor("the credit dropped", func() bool { id, us := a.LeaseCredit("vms"); return id == 0 && us == 0 })
}
