package store

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/etcdtest"
)

// A leader whose etcd stops answering gives up within TTL minus the margin
// of the last keepalive it sent, before etcd could expire its lease and
// elect a successor (the renewal happens when etcd receives the keepalive,
// never before it was sent).
func TestLeaderStepsDownBeforeLeaseExpires(t *testing.T) {
	e := etcdtest.Start(t)
	a := openEtcd(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, lost, err := a.Campaign(ctx, "A", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := a.cli.Leases(ctx)
	if err != nil || len(resp.Leases) == 0 {
		t.Fatalf("leases: %v %v", resp, err)
	}
	ttl, err := a.cli.TimeToLive(ctx, resp.Leases[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	life := time.Duration(ttl.GrantedTTL) * time.Second
	time.Sleep(life / 2) // some renewals went out and came back
	if !a.Holding() {
		t.Fatal("Holding false while the lease is renewed")
	}
	stopped := time.Now()
	if err := e.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer e.Cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-lost:
	case <-time.After(2 * life):
		t.Fatal("the leader never stepped down with etcd gone")
	}
	took := time.Since(stopped)
	if a.Holding() {
		t.Fatal("Holding true after the leadership was lost")
	}
	t.Logf("stepped down %v after etcd stopped (lease %v, margin %v)", took.Round(time.Millisecond), life, leaseMargin(life))
	// The last keepalive that came back was sent before the stop, so the
	// deadline is at most life − margin after it.
	if limit := life - leaseMargin(life) + 100*time.Millisecond; took > limit {
		t.Fatalf("stepped down %v after etcd stopped; want within %v (lease %v less the margin)", took, limit, life)
	}
}
