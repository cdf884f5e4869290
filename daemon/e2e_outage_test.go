package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/dockertest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The real engine: a controller cuts a container to 32 MiB (as a reclaim
// would), then goes away; the container then needs 96 MiB of the 128 MiB
// its user gave it. Plain Docker would have kept it, so escrad does: it
// raises the limit to Docker's on its own and the container finishes,
// with no OOM kill, long before --restore-after would have helped.
func TestOOMDuringOutageSurvivesToDockerLimit(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	p := startPeer(t)
	a := startAgent(t, "", p.Addr(), func(c *agent.Config) { c.RestoreAfter = 10 * time.Minute })
	const dockerMem = 128 << 20
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-outage"), Image: img, Labels: appLabel(t),
		Entrypoint: []string{"/bin/memhog"}, Cmd: []string{"-wait-usr1", "-mib", "96", "-step-mib", "8", "-pause", "20ms", "-hold", "300ms"},
		Resources: container.Resources{Memory: dockerMem, MemorySwap: dockerMem}})
	reg := p.WaitRegistered(id, 10*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: 3,
		Limits: &pb.Limits{MemoryLimitBytes: 32 << 20}}); err != nil || ack.Applied[0].Error != "" {
		t.Fatalf("set-limits: %v %v", ack, err)
	}
	j, err := dockertest.Inspect(ctx, cli, id)
	if err != nil || !j.State.Running {
		t.Fatalf("inspect: %v (running %v)", err, j.State != nil && j.State.Running)
	}
	memDir := cgroupOf(t, j.State.Pid).Memory
	if got := readFile(t, filepath.Join(memDir, "memory.limit_in_bytes")); got != strconv.Itoa(32<<20) {
		t.Fatalf("limit %s after the cut, want 32 MiB", got)
	}
	p.Close()
	for deadline := time.Now().Add(10 * time.Second); a.Connected(); {
		if time.Now().After(deadline) {
			t.Fatal("session still up 10 s after the controller closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := dockertest.StartHog(ctx, cli, id); err != nil {
		t.Fatal(err)
	}
	code, _, err := dockertest.Wait(ctx, cli, id)
	if err != nil {
		t.Fatalf("container hung or vanished: %v", err)
	}
	var kills uint64
	if b, err := os.ReadFile(filepath.Join(memDir, "memory.oom_control")); err == nil {
		kills, _ = cgroups.KeyedValue(b, "oom_kill")
	}
	o := oomOutcomes(t, a)
	if code != 0 || kills != 0 {
		t.Fatalf("exit %d, oom_kill %d, outcomes %v; want the container to finish within its Docker limit", code, kills, o)
	}
	if o["outage_raised"] == 0 {
		t.Fatalf("outcomes %v: no OOM was answered on the host, the test proved nothing", o)
	}
}
