package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/procstat"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// memOutcome is one memory hog's end, as a user sees it.
type memOutcome struct {
	ps      *os.ProcessState
	elapsed time.Duration
	high    uint64 // memory.events high, before → after
	kills   uint64 // memory.events oom_kill, after (delta)
}

// runMemHog runs hog-mem MiB in cg and reports how it ended.
func runMemHog(cg *harness.Cgroup, mib int64, limit time.Duration) (*memOutcome, error) {
	return runHog(cg, limit, "hog-mem", strconv.FormatInt(mib, 10))
}

func runHog(cg *harness.Cgroup, limit time.Duration, args ...string) (*memOutcome, error) {
	h0, _ := cg.Keyed("memory.events", "high")
	k0, _ := cg.Keyed("memory.events", "oom_kill")
	t0 := time.Now()
	hog, err := cg.Start(args...)
	if err != nil {
		return nil, err
	}
	ps, err := harness.WaitTimeout(hog, limit)
	if err != nil {
		return nil, fmt.Errorf("%v hung: %w", args, err)
	}
	o := &memOutcome{ps: ps, elapsed: time.Since(t0)}
	h1, _ := cg.Keyed("memory.events", "high")
	k1, _ := cg.Keyed("memory.events", "oom_kill")
	o.high, o.kills = h1-h0, k1-k0
	return o, nil
}

// scenarioCgroupfsOOMGrant: a hog outgrows its bootstrap limit; memory.high
// (8 MiB below memory.max) fires first, escrad asks, the controller grants
// from the app's pool, memory.max and the brake go up, and the hog
// completes: exit 0, oom_kill 0. Grants come in 4 MiB steps, half the
// brake margin, so the resumed hog is past the new brake at once and
// escrad must ask again (the recheck after a verdict) several times.
func scenarioCgroupfsOOMGrant(*harness.Env) error {
	cg, err := harness.NewCgroup("cf-grant")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := harness.StartController(ctx, 4<<20, server.AppSpec{Name: "cfgrant", CPUCores: 1, MemoryBytes: 128 << 20, Sigma: 0.5})
	if err != nil {
		return err
	}
	p, err := startEscrad(srv.TCPAddr(), [][3]string{{"cf-grant", "cfgrant", "/cf-grant"}})
	if err != nil {
		return err
	}
	defer p.stop()
	m, err := harness.Registered(srv, "cf-grant", cg)
	if err != nil {
		return err
	}
	boot := m.MemoryLimitBytes
	if err := harness.WaitBrake(cg, harness.BrakeFor(boot), 5*time.Second); err != nil {
		return fmt.Errorf("brake not set below the bootstrap limit: %w", err)
	}
	want := boot>>20 + 24 // MiB: past the brake and the limit, inside the pool
	o, err := runMemHog(cg, want, 90*time.Second)
	if err != nil {
		return err
	}
	m, _ = harness.Member(srv, "cf-grant")
	max, _ := cg.Get("memory.max")
	high, _ := cg.Get("memory.high")
	fmt.Printf("    hog %d MiB over a %d MiB bootstrap limit: %v after %v; memory.events high +%d, oom_kill +%d; controller %d requests, %d grants; memory.max %s, memory.high %s\n",
		want, boot>>20, o.ps, o.elapsed.Round(time.Millisecond), o.high, o.kills, m.OOMRequests, m.OOMGrants, max, high)
	if !o.ps.Success() || o.kills != 0 {
		return fmt.Errorf("hog %v with oom_kill +%d: want exit 0, no OOM kill", o.ps, o.kills)
	}
	if o.high == 0 || m.OOMGrants < 2 {
		return fmt.Errorf("memory.events high +%d, controller grants %d: want the brake to lead to several 4 MiB grants", o.high, m.OOMGrants)
	}
	newMax, err := strconv.ParseInt(max, 10, 64)
	if err != nil || newMax < want<<20 {
		return fmt.Errorf("memory.max %s after the grant, want >= %d MiB", max, want)
	}
	if high != harness.BrakeFor(newMax) {
		return fmt.Errorf("memory.high %s, want the brake 8 MiB below memory.max %s", high, max)
	}
	if n := p.metric(`escrad_oom_outcomes_total{outcome="granted"}`); n < 1 {
		return fmt.Errorf("escrad_oom_outcomes_total{outcome=\"granted\"} %v", n)
	}
	return nil
}

// scenarioCgroupfsOOMDeny: the app's pool is empty (σ = 0, one member), so
// the controller denies; escrad releases the brake and the kernel kills
// the hog at memory.max. After the kill the brake is set again.
func scenarioCgroupfsOOMDeny(*harness.Env) error {
	cg, err := harness.NewCgroup("cf-deny")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := harness.StartController(ctx, 0, server.AppSpec{Name: "cfdeny", CPUCores: 1, MemoryBytes: 48 << 20, Sigma: 0})
	if err != nil {
		return err
	}
	p, err := startEscrad(srv.TCPAddr(), [][3]string{{"cf-deny", "cfdeny", "/cf-deny"}})
	if err != nil {
		return err
	}
	defer p.stop()
	m, err := harness.Registered(srv, "cf-deny", cg)
	if err != nil {
		return err
	}
	boot := m.MemoryLimitBytes
	if err := harness.WaitBrake(cg, harness.BrakeFor(boot), 5*time.Second); err != nil {
		return err
	}
	o, err := runMemHog(cg, boot>>20+48, 60*time.Second)
	if err != nil {
		return err
	}
	m, _ = harness.Member(srv, "cf-deny")
	max, _ := cg.Get("memory.max")
	fmt.Printf("    hog %d MiB over a %d MiB limit: %v after %v; memory.events high +%d, oom_kill +%d; controller %d requests, %d denials; memory.max %s\n",
		boot>>20+48, boot>>20, o.ps, o.elapsed.Round(time.Millisecond), o.high, o.kills, m.OOMRequests, m.OOMDenials, max)
	if !harness.KilledBy(o.ps, syscall.SIGKILL) || o.kills == 0 {
		return fmt.Errorf("hog %v, oom_kill +%d: want an OOM kill", o.ps, o.kills)
	}
	if m.OOMDenials == 0 || m.OOMGrants != 0 {
		return fmt.Errorf("controller denials %d grants %d: want a denial and no grant", m.OOMDenials, m.OOMGrants)
	}
	if max != strconv.FormatInt(boot, 10) {
		return fmt.Errorf("memory.max %s after a denial, want %d unchanged", max, boot)
	}
	if n := p.metric(`escrad_oom_outcomes_total{outcome="denied"}`); n < 1 {
		return fmt.Errorf("escrad_oom_outcomes_total{outcome=\"denied\"} %v", n)
	}
	if err := harness.WaitBrake(cg, harness.BrakeFor(boot), 5*time.Second); err != nil {
		return fmt.Errorf("brake not set again after the OOM kill: %w", err)
	}
	// The group disappears under a running escrad (a plain cgroup removed
	// by its owner): kernfs then flags its memory.events on every poll;
	// escrad must not spin on it. Compared with escrad's own cost just
	// before (its 2 ms throttle poll alone costs a quarter to a half of an
	// emulated CPU under TCG on a loaded host), a spin adds about a CPU.
	b0 := procCPU(p.cmd.Process.Pid)
	time.Sleep(2 * time.Second)
	base := procCPU(p.cmd.Process.Pid) - b0
	cg.Remove()
	time.Sleep(500 * time.Millisecond)
	c0 := procCPU(p.cmd.Process.Pid)
	time.Sleep(2 * time.Second)
	used := procCPU(p.cmd.Process.Pid) - c0
	fmt.Printf("    group removed under escrad: escrad used %v of CPU in the next 2 s (%v in the 2 s before)\n", used, base)
	if used > base+700*time.Millisecond {
		return fmt.Errorf("escrad used %v of CPU in 2 s after its group was removed, %v before: spinning", used, base)
	}
	return nil
}

// procCPU is a process's user+system CPU time (0 once it is gone).
func procCPU(pid int) time.Duration {
	st, err := procstat.Read(pid)
	if err != nil {
		return 0
	}
	return st.CPU()
}
