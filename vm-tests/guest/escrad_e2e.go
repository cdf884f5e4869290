package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioEscradE2E runs the whole data path in the guest: escra.ko →
// escrad's agent with the kernel backend → escra-controller over
// loopback TCP/UDP, and back: records of a throttled CPU hog reach the
// controller, and a memory hog above its bootstrap limit is rescued by a
// controller grant (Escra §III, §IV-B/C) — exit 0, no OOM kill.
func scenarioEscradE2E(*harness.Env) error {
	// Verdict deadlines sized for a TCG guest on a busy host: escrad 1 s,
	// the module 2 s (it must outlast escrad).
	restore, err := harness.SetOOMTimeout(2000)
	if err != nil {
		return err
	}
	defer restore()
	cpuCg, err := harness.NewCgroup("e2e-cpu")
	if err != nil {
		return err
	}
	defer cpuCg.Remove()
	memCg, err := harness.NewCgroup("e2e-mem")
	if err != nil {
		return err
	}
	defer memCg.Remove()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := harness.StartController(ctx, 0, server.AppSpec{Name: "vmapp", CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.5})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	esc, err := harness.StartEscrad(ctx, srv.TCPAddr(), time.Second,
		containers.CgroupSpec{Name: "e2e-cpu", App: "vmapp", Path: "/e2e-cpu"},
		containers.CgroupSpec{Name: "e2e-mem", App: "vmapp", Path: "/e2e-mem"})
	if err != nil {
		return err
	}
	defer esc.Stop()

	// Registered and bootstrapped: decided by the controller and written
	// by escrad (the snapshot can show a decision before the write lands).
	if _, err := harness.Registered(srv, "e2e-cpu", cpuCg); err != nil {
		return err
	}
	mb, err := harness.Registered(srv, "e2e-mem", memCg)
	if err != nil {
		return err
	}
	boot := mb.MemoryLimitBytes
	hog, err := cpuCg.Start("hog-cpu")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()

	want := boot>>20 + 32 // MiB: above the bootstrap limit, inside the app's pool
	mem, err := memCg.Start("hog-mem", strconv.FormatInt(want, 10))
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(mem, 90*time.Second)
	if err != nil {
		return fmt.Errorf("memory hog: %w", err)
	}
	kills, err := memCg.Keyed("memory.events", "oom_kill")
	if err != nil {
		return err
	}
	m, _ := harness.Member(srv, "e2e-mem")
	if !ps.Success() || kills != 0 || m.OOMGrants == 0 {
		return fmt.Errorf("memory hog of %d MiB over a %d MiB bootstrap limit: %v, oom_kill %d, controller grants %d (requests %d): want exit 0, no kill, >= 1 grant",
			want, boot>>20, ps, kills, m.OOMGrants, m.OOMRequests)
	}
	time.Sleep(2 * time.Second)
	c, _ := harness.Member(srv, "e2e-cpu")
	if c.Periods < 10 {
		return fmt.Errorf("controller saw %d periods of the CPU hog, want >= 10", c.Periods)
	}
	fmt.Printf("    controller: e2e-cpu %d periods (%d throttled, last usage %d us of quota %d us); e2e-mem %d MiB -> %d MiB, %d OOM requests, %d grants; hog exit 0\n",
		c.Periods, c.ThrottledPeriods, c.CPUUsageUs, c.CPUQuotaUs, boot>>20, m.MemoryLimitBytes>>20, m.OOMRequests, m.OOMGrants)
	return esc.Early()
}
