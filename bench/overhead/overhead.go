// Package overhead measures, on a live container, what the report's
// overhead table compares: how long a limit change takes by a
// direct cgroup write (escrad's fast path) and through `docker update`
// (the Docker API), and how long a killed container takes to serve again
// (what an OOM kill costs when nothing rescues it).
package overhead

import (
	"context"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
)

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// ApplyLatency changes the CPU quota of the container n times each way,
// alternating two values, and returns the median time of a direct write
// of cpu.cfs_quota_us and of a ContainerUpdate call.
func ApplyLatency(ctx context.Context, cli *client.Client, id string, g *cgroups.Group, n int) (direct, docker time.Duration, err error) {
	quotas := []int64{50000, 60000}
	var d1, d2 []time.Duration
	for i := 0; i < n; i++ {
		q := quotas[i%2]
		t0 := time.Now()
		if err := g.SetCPULimit(q, 100000); err != nil {
			return 0, 0, fmt.Errorf("direct write: %w", err)
		}
		d1 = append(d1, time.Since(t0))
	}
	for i := 0; i < n; i++ {
		q := quotas[i%2]
		t0 := time.Now()
		if _, err := cli.ContainerUpdate(ctx, id, client.ContainerUpdateOptions{Resources: &container.Resources{CPUPeriod: 100000, CPUQuota: q}}); err != nil {
			return 0, 0, fmt.Errorf("docker update: %w", err)
		}
		d2 = append(d2, time.Since(t0))
	}
	return median(d1), median(d2), nil
}

// RestartToServe kills the container (SIGKILL, as the OOM killer does),
// starts it again and returns the time until its TCP port accepts.
func RestartToServe(ctx context.Context, cli *client.Client, id string, port int) (time.Duration, error) {
	wr := cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	waitC, errC := wr.Result, wr.Error
	t0 := time.Now()
	if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return 0, err
	}
	select {
	case <-waitC:
	case err := <-errC:
		return 0, err
	}
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		// The restart policy may have started it already.
		in, ierr := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if ierr != nil || in.Container.State == nil || !in.Container.State.Running {
			return 0, err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return time.Since(t0), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
