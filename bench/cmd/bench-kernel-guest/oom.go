package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// benchOOM: a hog touches 48 MiB under memory.max 16 MiB; each OOM request
// is granted after raising the limit by 1 MiB. The hog times every page
// touch; the slowest touches, one per grant, are the rescued charges.
func benchOOM(sum map[string]any) error {
	f, err := harness.NewOOMCgroup("bench-oom", 16<<20, 2000) // measure latency, not timeouts
	if err != nil {
		return err
	}
	defer f.Close()
	cg, ctl := f.Cgroup, f.Owner
	lat := "/tmp/bench-oom-lat"
	hog, err := cg.Start("hog-mem-timed", "48", lat)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _, _ = harness.WaitTimeout(hog, 120*time.Second); close(exited) }()
	grants := 0
loop:
	for {
		select {
		case req := <-ctl.Requests():
			if req.CgroupID != cg.ID {
				continue
			}
			if err := cg.Set("memory.max", strconv.FormatUint(req.MaxBytes+1<<20, 10)); err != nil {
				return err
			}
			if err := ctl.ReplyOOM(req.ID, true); err != nil {
				return err
			}
			grants++
		case <-exited:
			break loop
		}
	}
	if !hog.ProcessState.Success() {
		return fmt.Errorf("hog: %v", hog.ProcessState)
	}
	resc, err := rescueLatencies(lat, grants)
	if err != nil {
		return err
	}
	pct := func(p float64) float64 { return resc[int(p*float64(len(resc)-1))] }
	sum["oom_rescues_direct"] = grants
	sum["oom_rescue_direct_p50_us"] = pct(0.50)
	sum["oom_rescue_direct_p99_us"] = pct(0.99)
	fmt.Printf("bench: %d direct OOM rescues, p50 %.0f us, p99 %.0f us\n", grants, pct(0.5), pct(0.99))
	return nil
}

// benchOOMEscrad: Escra's path — blocked in try_charge_memcg → escra.ko
// → escrad (kernel backend) → controller grant (1 MiB steps) → escrad
// raises memory.max → reply → charge retried. With raised false the
// timeouts are the defaults a user gets (the module's oom_timeout_ms,
// escrad's verdict deadline); keys are prefix+"oom_rescue_*".
func benchOOMEscrad(sum map[string]any, prefix string, raised bool) error {
	var deadline time.Duration // agent default
	if raised {
		// Under TCG one round trip through escrad and the controller can
		// exceed the module's 100 ms default and escrad's 200 ms verdict
		// deadline: 1 s for escrad, 2 s for the module (which must outlast
		// escrad).
		restore, err := harness.SetOOMTimeout(2000)
		if err != nil {
			return err
		}
		defer restore()
		deadline = time.Second
	}
	sum[prefix+"oom_rescue_timeout_ms"], _ = strconv.Atoi(strings.TrimSpace(harness.ReadProc("/sys/module/escra/parameters/oom_timeout_ms")))
	var st0 kmod.Stats
	if c, err := kmod.Dial(); err == nil {
		st0, _ = c.Stats()
		c.Close()
	}
	cg, err := harness.NewCgroup("bench-e2e")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := harness.StartController(ctx, 1<<20, server.AppSpec{Name: "benchapp", CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.75})
	if err != nil {
		return err
	}
	esc, err := harness.StartEscrad(ctx, srv.TCPAddr(), deadline,
		containers.CgroupSpec{Name: "bench-e2e", App: "benchapp", Path: "/bench-e2e"})
	if err != nil {
		return err
	}
	defer esc.Stop()
	mb, err := harness.Registered(srv, "bench-e2e", cg)
	if err != nil {
		return err
	}
	boot := mb.MemoryLimitBytes
	lat := "/tmp/bench-e2e-lat"
	hog, err := cg.Start("hog-mem-timed", strconv.FormatInt(boot>>20+32, 10), lat)
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(hog, 120*time.Second)
	if err != nil {
		return err
	}
	// A grant after the module gave up raised memory.max for a task
	// already on the kill path: escrad counts each one (kept also when
	// the hog was killed: it may say why).
	late, err := esc.Counter("escrad_oom_late_grants_total")
	if err != nil {
		return err
	}
	sum[prefix+"oom_late_grants"] = late
	var grants uint64
	for _, c := range srv.Snapshot().Containers {
		if c.Name == "bench-e2e" {
			grants = c.OOMGrants
		}
	}
	if !ps.Success() {
		harness.PrintOOMReport()
		var ks kmod.Stats
		if c, err := kmod.Dial(); err == nil {
			ks, _ = c.Stats()
			c.Close()
		}
		var c0 server.ContainerState
		for _, c := range srv.Snapshot().Containers {
			if c.Name == "bench-e2e" {
				c0 = c
			}
		}
		return fmt.Errorf("hog %v after %d grants (controller: %d requests, %d denials; module: %d requests, %d granted, %d timeouts)",
			ps, grants, c0.OOMRequests, c0.OOMDenials, ks.OOMRequests, ks.OOMGranted, ks.OOMTimeouts)
	}
	resc, err := rescueLatencies(lat, int(grants))
	if err != nil {
		return err
	}
	var st1 kmod.Stats
	if c, err := kmod.Dial(); err == nil {
		st1, _ = c.Stats()
		c.Close()
	}
	pct := func(p float64) float64 { return resc[int(p*float64(len(resc)-1))] }
	sum[prefix+"oom_rescues"] = grants
	sum[prefix+"oom_rescue_p50_us"] = pct(0.50)
	sum[prefix+"oom_rescue_p99_us"] = pct(0.99)
	sum[prefix+"oom_rescue_module_timeouts"] = st1.OOMTimeouts - st0.OOMTimeouts
	fmt.Printf("bench: %d OOM rescues through escrad and the controller (module timeout %v ms), p50 %.0f us, p99 %.0f us, %d module timeouts\n",
		grants, sum[prefix+"oom_rescue_timeout_ms"], pct(0.5), pct(0.99), st1.OOMTimeouts-st0.OOMTimeouts)
	return nil
}

// rescueLatencies reads hog-mem-timed's file and returns the n slowest
// page touches (the rescued charges), sorted ascending.
func rescueLatencies(path string, n int) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var us []float64
	for _, f := range strings.Fields(string(b)) {
		if v, err := strconv.ParseFloat(f, 64); err == nil {
			us = append(us, v)
		}
	}
	if n == 0 || len(us) < n {
		return nil, errors.New("no rescued charges measured")
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(us)))
	r := us[:n]
	sort.Float64s(r)
	return r, nil
}

// hogMemTimed touches args[0] MiB and writes each touch's latency (us) to args[1].
func hogMemTimed(args []string) int {
	n := harness.AtoiArg(args, 0, 48)
	b := make([]byte, n<<20)
	lat := make([]string, 0, len(b)/4096)
	for i := 0; i < len(b); i += 4096 {
		t := time.Now()
		b[i] = 1
		lat = append(lat, strconv.FormatFloat(float64(time.Since(t).Nanoseconds())/1e3, 'f', 1, 64))
	}
	if len(args) > 1 {
		out := []byte(strings.Join(lat, "\n"))
		// The file's page cache is charged inside write(2), which the
		// OOM hook does not cover (only user faults wait for a verdict):
		// at a limit granted to fit the touches, it would be killed.
		// Give the touched memory back first.
		runtime.KeepAlive(b)
		b = nil
		debug.FreeOSMemory()
		if err := os.WriteFile(args[1], out, 0o644); err != nil {
			fmt.Println("hog-mem-timed:", err)
			return 1
		}
	}
	return 0
}
