package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/internal/dockertest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// escrad --cfs-burst 0.5 on a real container: the burst follows every
// quota the controller sends, a cut below the burst lands, and Docker's own
// update (runc rewriting the quota) does not undo either.
func TestCFSBurstFollowsTheControllersQuota(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	startAgent(t, "", p.Addr(), func(c *agent.Config) { c.CFSBurst = 0.5 })
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-burst"), Image: img, Cmd: []string{"-for", "60s"}, Labels: appLabel(t),
		Resources: container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, CPUQuota: 50000, CPUPeriod: 100000}})
	reg := p.WaitRegistered(id, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	dir := cgroupOf(t, inspectPid(t, cli, id)).CPU
	if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_burst_us")); err != nil {
		t.Skip("no cgroup v1 cpu.cfs_burst_us on this host")
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eDockerSync+20*time.Second)
	defer cancel()
	for gen, c := range []struct {
		q            int64
		quota, burst string
	}{{80000, "80000", "40000"}, {6000, "6000", "3000"}, {30000, "30000", "15000"}} {
		q := c.q
		ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: uint64(gen + 1), Limits: &pb.Limits{CpuQuotaUs: q}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ack.Applied) != 1 || ack.Applied[0].Error != "" {
			t.Fatalf("quota %s: ack %v", c.quota, ack)
		}
		if got := readFile(t, filepath.Join(dir, "cpu.cfs_quota_us")); got != c.quota {
			t.Fatalf("quota %s, want %s", got, c.quota)
		}
		if got := readFile(t, filepath.Join(dir, "cpu.cfs_burst_us")); got != c.burst {
			t.Fatalf("quota %s: burst %s, want %s", c.quota, got, c.burst)
		}
	}
	// Docker's view follows; runc's write of the same quota leaves both.
	deadline := time.Now().Add(e2eDockerSync + 10*time.Second)
	for {
		j, err := dockertest.Inspect(ctx, cli, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.HostConfig.CPUQuota == 30000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker inspect shows quota %d, want 30000", j.HostConfig.CPUQuota)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if q, b := readFile(t, filepath.Join(dir, "cpu.cfs_quota_us")), readFile(t, filepath.Join(dir, "cpu.cfs_burst_us")); q != "30000" || b != "15000" {
		t.Errorf("after docker's update: quota %s burst %s, want 30000 and 15000", q, b)
	}
}
