package failure

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/procstat"
)

var guardPidRe = regexp.MustCompile(`oom_guard_pid=(\d+)`)

// killDaemonAndGuard kills escrad and its OOM guard together, by PID: both
// are stopped first so neither can act on the other's death, then both
// get SIGKILL (what `systemctl kill -s KILL` or a host OOM kill of the
// unit does).
func killDaemonAndGuard(t *testing.T, d *proc) {
	t.Helper()
	m := guardPidRe.FindStringSubmatch(d.logText())
	if m == nil {
		t.Fatal("escrad did not log its oom_guard_pid")
	}
	guard, _ := strconv.Atoi(m[1])
	if guard <= 0 {
		t.Fatalf("escrad runs without a guard (pid %d)", guard)
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		if err := syscall.Kill(guard, sig); err != nil {
			t.Fatalf("guard %d: %v", guard, err)
		}
		d.kill(sig)
	}
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		t.Fatal("escrad did not die on SIGKILL")
	}
	within(t, "guard gone", 5*time.Second, func() bool {
		st, err := procstat.Read(guard)
		// Gone, or a zombie nobody reaped yet: either way it acts no more.
		return err != nil || st.Zombie()
	})
}

// hungHog starts a labelled memhog, waits until escrad armed its trap and
// the state file lists it, stops the controller (SIGSTOP: the OOM request
// will wait) and lets the hog grow into its limit.
func hungHog(t *testing.T, cli *client.Client, img string, c *cluster) (string, cgroups.Paths) {
	t.Helper()
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("fail-dk"), Image: img,
		Entrypoint: []string{"/bin/memhog"}, Cmd: []string{"-mib", "256", "-step-mib", "8", "-wait-usr1", "-hold", "1m"},
		Labels:    c.labels(),
		Resources: container.Resources{Memory: 48 << 20, MemorySwap: 48 << 20}})
	p := cgroupFor(t, cli, id)
	oc := filepath.Join(p.Memory, "memory.oom_control")
	within(t, "registered, armed and listed in the state file", 10*time.Second, func() bool {
		ms, _ := c.members()
		st, _ := os.ReadFile(c.oomState)
		bootstrapped := false // its first limits applied: no SetLimits left in flight
		for _, m := range ms {
			bootstrapped = bootstrapped || m.ContainerID == id && m.Generation > 0
		}
		return bootstrapped && oomKillDisabled(t, p) && strings.Contains(string(st), oc+"\n")
	})
	c.ctl.kill(syscall.SIGSTOP)
	ctl := c.ctl
	t.Cleanup(func() { ctl.kill(syscall.SIGCONT) }) // runs before its stop
	if err := dockertest.StartHog(context.Background(), cli, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !underOOM(t, p) {
		if time.Now().After(deadline) {
			t.Fatalf("no task of the hog at its limit within 10 s (limit %d, usage %d, running %v)",
				readInt(t, filepath.Join(p.Memory, "memory.limit_in_bytes")), readInt(t, filepath.Join(p.Memory, "memory.usage_in_bytes")), running(t, cli, id))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return id, p
}

// escrad and its guard SIGKILLed together while a task waits at its limit:
// nothing clears oom_kill_disable, the task waits (the window
// docs/security.md names) until `escrad restore-oom`, the unit's
// ExecStopPost=, re-enables the kernel OOM killer: the hog is OOM-killed.
func TestDaemonAndGuardKilledTogetherRestoreCommand(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	c := newCluster(t, "0.5", "512MiB")
	c.extraD = []string{"--oom-deadline", "30s"} // only a restore may end the wait
	c.startController()
	c.startDaemon()
	id, p := hungHog(t, cli, img, c)

	killDaemonAndGuard(t, c.d)
	time.Sleep(time.Second)
	if !running(t, cli, id) || !underOOM(t, p) || !oomKillDisabled(t, p) {
		t.Fatal("the hog was released without escrad, guard or restore: the test no longer shows the window")
	}

	t0 := time.Now()
	out, err := exec.Command(filepath.Join(c.bin, "escrad"), append([]string{"restore-oom"}, c.daemonArgs()...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("escrad restore-oom: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, oomKilled, err := dockertest.Wait(ctx, cli, id)
	if err != nil {
		t.Fatalf("hog still hung 10 s after escrad restore-oom: %v\n%s", err, out)
	}
	took := time.Since(t0)
	t.Logf("escrad+guard SIGKILL, then escrad restore-oom -> hog ended (oom_killed=%v) %v after the command started", oomKilled, took.Round(time.Millisecond))
	if !oomKilled {
		t.Fatalf("hog ended but not by the kernel OOM killer\n%s", out)
	}
	if took > 2*time.Second {
		t.Fatalf("hog OOM-killed only %v after restore-oom started", took)
	}
	if !strings.Contains(string(out), "task_waiting=true") {
		t.Fatalf("restore-oom did not report the waiting task:\n%s", out)
	}
}

// A restarted escrad restores first: the groups the dead escrad armed get
// oom_kill_disable 0 before it arms anything again, so a task that waited
// through the double kill meets the kernel OOM killer instead of being
// trapped again; then the live container is re-armed as usual.
func TestRestartedDaemonRestoresBeforeRearming(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	c := newCluster(t, "0.5", "512MiB")
	c.extraD = []string{"--oom-deadline", "30s"}
	c.startController()
	c.startDaemon()
	idle := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("fail-dk-idle"), Image: img,
		Cmd: []string{"-idle"}, Labels: c.labels(),
		Resources: container.Resources{CPUQuota: 50000, CPUPeriod: 100000, Memory: 64 << 20, MemorySwap: 64 << 20}})
	idleP := cgroupFor(t, cli, idle)
	hog, hogP := hungHog(t, cli, img, c)

	killDaemonAndGuard(t, c.d)
	time.Sleep(500 * time.Millisecond)
	if !underOOM(t, hogP) || !oomKillDisabled(t, idleP) {
		t.Fatal("groups released without escrad or guard")
	}
	c.ctl.sigkill(t) // the stopped controller; a fresh one would grant
	c.startController()

	t0 := time.Now()
	d := c.startDaemon()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, oomKilled, err := dockertest.Wait(ctx, cli, hog)
	if err != nil {
		t.Fatalf("hog still waiting 10 s after escrad restarted: %v", err)
	}
	took := time.Since(t0)
	t.Logf("escrad restart after the double kill -> hog ended (oom_killed=%v) %v after the start", oomKilled, took.Round(time.Millisecond))
	if !oomKilled || took > 3*time.Second {
		t.Fatalf("hog not OOM-killed at escrad's restart (oom_killed=%v after %v)", oomKilled, took)
	}
	// The controller restores its members from its store and escrad arms a
	// group just before it logs "managing container": wait for the line too.
	within(t, "idle container registered and re-armed", 5*time.Second, func() bool {
		ms, _ := c.members()
		return len(ms) == 1 && ms[0].ContainerID == idle && oomKillDisabled(t, idleP) &&
			strings.Contains(d.logText(), "managing container")
	})
	lines := strings.Split(d.logText(), "\n")
	restored, managed := -1, -1
	for i, l := range lines {
		if restored < 0 && strings.Contains(l, "OOM killer re-enabled") && strings.Contains(l, hogP.Memory) && strings.Contains(l, "task_waiting=true") {
			restored = i
		}
		if managed < 0 && strings.Contains(l, "managing container") {
			managed = i
		}
	}
	if restored < 0 || managed < 0 || restored > managed {
		t.Fatalf("want the hog's restore (line %d) before the first re-arm (line %d):\n%s", restored, managed, d.logText())
	}

	// A clean stop clears every group itself and leaves no state file.
	d.kill(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Fatal("escrad did not stop on SIGTERM")
	}
	if oomKillDisabled(t, idleP) {
		t.Fatal("idle container left with its OOM killer disabled after a clean stop")
	}
	if _, err := os.Stat(c.oomState); err == nil {
		t.Fatalf("state file %s left after a clean stop", c.oomState)
	}
}

var guardRestartRe = regexp.MustCompile(`oom guard died alone.*old_pid=(\d+) oom_guard_pid=(\d+)`)

// The guard SIGKILLed alone: escrad starts another and tells it the armed
// set, so escrad's own SIGKILL afterwards still re-enables the kernel OOM
// killer of the trapped container at once.
func TestGuardKilledAloneIsReplaced(t *testing.T) {
	cli, c, id, p := armedIdle(t, "fail-g")
	m := guardPidRe.FindStringSubmatch(c.d.logText())
	if m == nil {
		t.Fatal("escrad did not log its oom_guard_pid")
	}
	first, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatalf("guard %d: %v", first, err)
	}
	var second int
	took := within(t, "escrad replaced its guard", 5*time.Second, func() bool {
		r := guardRestartRe.FindStringSubmatch(c.d.logText())
		if r == nil {
			return false
		}
		old, _ := strconv.Atoi(r[1])
		second, _ = strconv.Atoi(r[2])
		if old != first || second <= 0 || second == first {
			t.Fatalf("restart logged old %s new %s; killed %d", r[1], r[2], first)
		}
		return true
	})
	t.Logf("guard SIGKILL -> replaced (pid %d -> %d) in %v", first, second, took.Round(time.Millisecond))
	if !oomKillDisabled(t, p) {
		t.Fatal("the trap was cleared by the guard's death alone: escrad is still watching")
	}

	c.d.sigkill(t)
	took = within(t, "OOM killer re-enabled by the replacement guard", 2*time.Second, func() bool { return !oomKillDisabled(t, p) })
	t.Logf("escrad SIGKILL -> oom_kill_disable 0 by the replacement guard: %v", took.Round(time.Millisecond))
	if !running(t, cli, id) {
		t.Fatal("container stopped with its daemon")
	}
}

// armedIdle starts a controller, escrad and one idle labelled container
// (0.5 core, 64 MiB) and waits until it is registered and its OOM trap armed.
func armedIdle(t *testing.T, name string) (*client.Client, *cluster, string, cgroups.Paths) {
	t.Helper()
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	c := newCluster(t, "0.5", "512MiB")
	c.startController()
	c.startDaemon()
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName(name), Image: img,
		Cmd: []string{"-idle"}, Labels: c.labels(),
		Resources: container.Resources{CPUQuota: 50000, CPUPeriod: 100000, Memory: 64 << 20, MemorySwap: 64 << 20}})
	p := cgroupFor(t, cli, id)
	within(t, "registered and OOM trap armed", 10*time.Second, func() bool {
		ms, _ := c.members()
		return len(ms) == 1 && oomKillDisabled(t, p)
	})
	return cli, c, id, p
}
