package failure

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/internal/dockertest"
)

// Controller SIGKILLed and restarted: the daemon keeps the last limits,
// reconnects (backoff with jitter, capped at 1 s), the restarted
// controller rebuilds its view from the registrations (each container
// once) and allocates again within 2 s.
func TestControllerKilledAndRestarted(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	c := newCluster(t, "0.6", "512MiB")
	c.startController()
	c.startDaemon()
	ids := map[string]bool{}
	for i := range 2 {
		ids[dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("fail-ctl"), Image: img,
			Cmd: []string{"-idle"}, Labels: c.labels(),
			Resources: container.Resources{CPUQuota: 100000 + int64(i)*10000, CPUPeriod: 100000, Memory: 128 << 20, MemorySwap: 128 << 20}})] = true
	}
	quota := map[string]string{}
	within(t, "both containers registered and their bootstrap limits in the cgroups", 10*time.Second, func() bool {
		ms, err := c.members()
		if err != nil || len(ms) != 2 {
			return false
		}
		for _, m := range ms {
			if !ids[m.ContainerID] {
				return false
			}
			q := readInt(t, filepath.Join(cgroupFor(t, cli, m.ContainerID).CPU, "cpu.cfs_quota_us"))
			if m.Generation == 0 || q != m.CPUQuotaUs {
				return false
			}
			quota[m.ContainerID] = filepath.Join(cgroupFor(t, cli, m.ContainerID).CPU, "cpu.cfs_quota_us")
		}
		return true
	})
	before := map[string]int64{}
	for id, f := range quota {
		before[id] = readInt(t, f)
	}

	c.ctl.sigkill(t)
	time.Sleep(1500 * time.Millisecond) // the daemon retries meanwhile
	for id, f := range quota {
		if !running(t, cli, id) {
			t.Fatalf("container %s stopped while the controller was down", id[:12])
		}
		if q := readInt(t, f); q != before[id] {
			t.Fatalf("limits changed while the controller was down: %d -> %d", before[id], q)
		}
	}

	c.startController() // returns at the ready line
	took := within(t, "view rebuilt from registrations and limits applied", 2*time.Second, func() bool {
		ms, err := c.members()
		if err != nil || len(ms) != 2 {
			return false
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m.ContainerID] || quota[m.ContainerID] == "" || m.Generation == 0 {
				return false
			}
			seen[m.ContainerID] = true
			if readInt(t, quota[m.ContainerID]) != m.CPUQuotaUs {
				return false
			}
		}
		return true
	})
	t.Logf("controller restart -> both containers registered once, limits applied: %v", took.Round(time.Millisecond))
	ms, _ := c.members()
	var sum int64
	for _, m := range ms {
		sum += m.CPUQuotaUs
	}
	if sum > 60000 {
		t.Fatalf("Σ quota %d µs over the app's 0.6 cores after the restart", sum)
	}
	if n := strings.Count(c.d.logText(), "controller session up"); n < 2 {
		t.Fatalf("escrad reconnected %d times", n-1)
	}
}

// escrad SIGKILLed: its OOM guard re-enables the kernel OOM killer of every
// trapped container at once; the container keeps running; a restarted
// escrad rediscovers it, registers it once and re-arms the trap.
func TestDaemonKilledAndRestarted(t *testing.T) {
	cli, c, id, p := armedIdle(t, "fail-d")

	c.d.sigkill(t)
	took := within(t, "OOM killer re-enabled after escrad's SIGKILL", time.Second, func() bool { return !oomKillDisabled(t, p) })
	t.Logf("escrad SIGKILL -> oom_kill_disable 0 by the guard: %v", took.Round(time.Millisecond))
	within(t, "controller drops the dead daemon's container", 5*time.Second, func() bool {
		ms, _ := c.members()
		return len(ms) == 0
	})
	if !running(t, cli, id) {
		t.Fatal("container stopped with its daemon")
	}

	c.startDaemon()
	took = within(t, "rediscovered, registered once, trap re-armed", 5*time.Second, func() bool {
		ms, _ := c.members()
		return len(ms) == 1 && ms[0].ContainerID == id && oomKillDisabled(t, p)
	})
	t.Logf("escrad restart -> container registered once and re-armed: %v", took.Round(time.Millisecond))
}

// An OOM request pending when the controller dies (SIGSTOP so it cannot
// answer, then SIGKILL) ends at the crash, well before a long deadline:
// the kernel OOM killer acts. And one pending when escrad itself dies
// ends through the guard.
func TestPendingOOMEndsOnCrash(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	for _, who := range []string{"controller", "escrad"} {
		t.Run(who, func(t *testing.T) {
			c := newCluster(t, "0.5", "512MiB")
			c.extraD = []string{"--oom-deadline", "30s"} // only the crash may end the wait
			c.startController()
			c.startDaemon()
			id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("fail-oom"), Image: img,
				Entrypoint: []string{"/bin/memhog"}, Cmd: []string{"-mib", "256", "-step-mib", "8", "-wait-usr1", "-hold", "1m"},
				Labels:    c.labels(),
				Resources: container.Resources{Memory: 48 << 20, MemorySwap: 48 << 20}})
			p := cgroupFor(t, cli, id)
			within(t, "registered and armed", 10*time.Second, func() bool {
				ms, _ := c.members()
				return len(ms) == 1 && oomKillDisabled(t, p)
			})
			c.ctl.kill(19) // SIGSTOP: the request will wait
			if err := dockertest.StartHog(context.Background(), cli, id); err != nil {
				t.Fatal(err)
			}
			within(t, "OOM request pending (task at its limit)", 10*time.Second, func() bool {
				return underOOM(t, p)
			})
			time.Sleep(300 * time.Millisecond)
			if !running(t, cli, id) {
				t.Fatal("memhog ended before the crash")
			}
			crash := time.Now()
			if who == "controller" {
				c.ctl.sigkill(t)
			} else {
				c.d.sigkill(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, oomKilled, err := dockertest.Wait(ctx, cli, id)
			if err != nil {
				t.Fatalf("pending OOM wait still hanging 10 s after the %s crash: %v", who, err)
			}
			took := time.Since(crash)
			t.Logf("%s SIGKILL with an OOM request pending -> container ended (oom_killed=%v) after %v", who, oomKilled, took.Round(time.Millisecond))
			if took > 2*time.Second {
				t.Fatalf("pending OOM outlived the %s crash by %v", who, took)
			}
			if who == "escrad" {
				c.ctl.kill(18) // SIGCONT so cleanup can stop it
			}
		})
	}
}
