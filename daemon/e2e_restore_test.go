package daemon_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/internal/dockertest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The real engine: a controller moves a container's limits, then goes
// away; after --restore-after the cgroup and docker inspect hold the
// limits the container was started with again.
func TestRestoreDockerLimitsWithoutController(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	startAgent(t, "", p.Addr(), func(c *agent.Config) { c.RestoreAfter = time.Second })
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-restore"), Image: img, Cmd: []string{"-for", "60s"}, Labels: appLabel(t),
		Resources: container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, CPUQuota: 50000, CPUPeriod: 100000}})
	reg := p.WaitRegistered(id, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	paths := cgroupOf(t, inspectPid(t, cli, id))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: 3,
		Limits: &pb.Limits{CpuQuotaUs: 23000, MemoryLimitBytes: 96 << 20}}); err != nil || ack.Applied[0].Error != "" {
		t.Fatalf("set-limits: %v %v", ack, err)
	}
	both := func(quota, mem int64) (bool, string) {
		q := readFile(t, filepath.Join(paths.CPU, "cpu.cfs_quota_us"))
		m := readFile(t, filepath.Join(paths.Memory, "memory.limit_in_bytes"))
		j, err := dockertest.Inspect(ctx, cli, id)
		if err != nil {
			t.Fatal(err)
		}
		ok := q == strconv.FormatInt(quota, 10) && m == strconv.FormatInt(mem, 10) &&
			j.HostConfig.CPUQuota == quota && j.HostConfig.Memory == mem
		return ok, "cgroup " + q + "/" + m + ", inspect " + strconv.FormatInt(j.HostConfig.CPUQuota, 10) + "/" + strconv.FormatInt(j.HostConfig.Memory, 10)
	}
	wait := func(quota, mem int64, within time.Duration) time.Duration {
		t.Helper()
		t0 := time.Now()
		for {
			ok, got := both(quota, mem)
			if ok {
				return time.Since(t0)
			}
			if time.Since(t0) > within {
				t.Fatalf("want quota %d memory %d in the cgroup and docker inspect; %s", quota, mem, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Docker's view follows within the reconciler's window.
	wait(23000, 96<<20, e2eDockerSync+5*time.Second)
	p.Close()
	took := wait(50000, 64<<20, e2eDockerSync+10*time.Second)
	t.Logf("Docker's limits back in the cgroup and docker inspect %v after the controller went away (restore-after 1 s)", took.Round(time.Millisecond))
}
