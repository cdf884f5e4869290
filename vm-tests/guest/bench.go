package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/escra-dev/escra/bench/telebench"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/daemon/source/kmod"
)

// runBench measures the kernel path inside the VM (make bench-kernel):
// the kernel and cgroupfs telemetry backends side by side at a 100 ms
// period on 100 groups (bench/telebench, the code bench-bpf runs on the
// host), and how long a charge stays blocked when a handler grants by
// raising memory.max: first with the defaults a user gets (escra.ko's
// oom_timeout_ms, escrad's verdict deadline), then with both raised so a
// slow emulated round trip shows as latency. Under TCG absolute times are
// inflated; compare ratios, or runs on the same host.
func runBench(module, out string) error {
	if !moduleLoaded() {
		if err := loadModule(module, ""); err != nil {
			return err
		}
	}
	sum := map[string]any{}
	if err := benchTelemetry(sum); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	if err := benchOOM(sum); err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	if err := benchOOMEscrad(sum, "kernel_", false); err != nil {
		// Reported, not fatal: what a user gets may be a kill under TCG.
		fmt.Println("bench: OOM rescue through escrad (default timeouts) failed:", err)
		sum["kernel_oom_rescue_error"] = trunc(err.Error())
	}
	if err := benchOOMEscrad(sum, "", true); err != nil {
		fmt.Println("bench: OOM rescue through escrad failed:", err)
		sum["oom_rescue_escrad_error"] = trunc(err.Error())
	}
	if err := benchCgroupfsOOM(sum); err != nil {
		fmt.Println("bench: cgroupfs OOM rescue failed:", err)
		sum["cgroupfs_oom_rescue_error"] = trunc(err.Error())
	}
	ratios(sum)
	telebench.Ratios(sum)
	sum["accel"] = "tcg"
	sum["guest_cpus"] = strings.Count(readProc("/proc/cpuinfo"), "processor\t:")
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

// The telemetry comparison's plan: the host's (bench/cmd/bench-bpf).
const (
	benchGroups = 100
	benchBusy   = 10
	benchPeriod = 100 * time.Millisecond
	benchWindow = 20 * time.Second
)

// benchTelemetry: 100 groups at a 100 ms CFS period, 10 busy loops under
// a 1 % quota and 90 light duty loads, watched by the kernel backend
// (kmod.Source over escra.ko) and the cgroupfs backend at once (records,
// flags), then each alone (CPU). The kernel backend's CPU is this
// process's (receiving, decoding, the usage probe) plus the module's own
// kernel time: the CFS hook and the drain work (hook_ns_total,
// drain_ns_total), which no process's rusage sees.
func benchTelemetry(sum map[string]any) error {
	ctl, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	var gs []telebench.Group
	var cgs []*cgroup
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
		}
		for _, g := range gs {
			g.G.Close()
		}
		for _, cg := range cgs {
			cg.remove()
		}
	}()
	for i := 0; i < benchGroups; i++ {
		cg, err := newCgroup(fmt.Sprintf("bench-tel-%03d", i))
		if err != nil {
			return err
		}
		cgs = append(cgs, cg)
		busy := i < benchBusy
		quota, work := telebench.LightQuotaUs, []string{"duty"}
		if busy {
			quota, work = telebench.BusyQuotaUs, []string{"hog-cpu"}
		}
		if err := cg.set("cpu.max", fmt.Sprintf("%d %d", quota, benchPeriod.Microseconds())); err != nil {
			return err
		}
		p, err := cg.start(work...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		g, err := cgroups.Open(cgroups.Paths{Version: cgroups.V2, Unified: cg.path})
		if err != nil {
			return err
		}
		gs = append(gs, telebench.Group{G: g, Busy: busy})
	}
	time.Sleep(2 * time.Second) // workloads settle
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	kernel := telebench.Spec{Name: "kernel", New: func(bool) (telebench.Backend, error) {
		src, err := kmod.NewSource(benchPeriod, quiet)
		if err != nil {
			return telebench.Backend{}, err
		}
		return telebench.Backend{Src: src, Probe: func() telebench.Counters {
			st, _ := ctl.Stats()
			return telebench.Counters{KernelNs: st.HookNsTotal + st.DrainNsTotal, Dropped: st.RecordsDropped,
				PartsNs: map[string]uint64{"hook": st.HookNsTotal, "drain": st.DrainNsTotal},
				Counts:  map[string]uint64{"hook_calls": st.HookCalls, "records_sent": st.RecordsSent}}
		}}, nil
	}, CFSPeriods: true}
	cgroupfs := func(watcher bool) telebench.Spec {
		name := "cgroupfs"
		if watcher {
			name = "cgroupfs_watcher"
		}
		return telebench.Spec{Name: name, New: func(bool) (telebench.Backend, error) {
			src, err := cgroupfs.NewSource(benchPeriod, quiet)
			if err != nil {
				return telebench.Backend{}, err
			}
			if !watcher { // period records only, as on the host
				src.ThrottlePoll, src.ThrottleNear = 0, 0
			}
			src.Limits = func(h uint32) (int64, uint32) {
				if gs[h-1].Busy {
					return telebench.BusyQuotaUs, uint32(benchPeriod.Microseconds())
				}
				return telebench.LightQuotaUs, uint32(benchPeriod.Microseconds())
			}
			return telebench.Backend{Src: src}, nil
		}}
	}
	rs, err := telebench.Compare(telebench.Config{Groups: gs, Window: benchWindow,
		Together: []telebench.Spec{kernel, cgroupfs(false)}, AloneOnly: []telebench.Spec{cgroupfs(true)},
		Say: func(f string, a ...any) { fmt.Printf("bench: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	k, c, w := rs["kernel"], rs["cgroupfs"], rs["cgroupfs_watcher"]
	where := fmt.Sprintf("QEMU TCG guest, %d vCPUs, patched kernel %s, cgroup v2",
		strings.Count(readProc("/proc/cpuinfo"), "processor\t:"), strings.TrimSpace(readProc("/proc/sys/kernel/osrelease")))
	for _, m := range []map[string]any{telebench.Keys("kernel", k), telebench.Keys("cgroupfs", c), {
		"cgroupfs_watcher_cpu_us_per_record":     telebench.Round(w.CPUUsPerRec),
		"cgroupfs_watcher_throttle_events_per_s": telebench.Round(w.EventsPerS),
		"telemetry_groups":                       benchGroups,
		"telemetry_busy_groups":                  benchBusy,
		"telemetry_period_ms":                    benchPeriod.Milliseconds(),
		"telemetry_window_s":                     telebench.Round(k.WindowSeconds),
		"kernel_measured_on":                     where,
	}} {
		for key, v := range m {
			sum[key] = v
		}
	}
	if n := k.Counts["hook_calls"]; n > 0 {
		sum["hook_cost_ns"] = telebench.Round(k.PartsUs["hook"] * 1e3 / float64(n))
	}
	for _, r := range []telebench.Result{k, c, w} {
		fmt.Printf("bench: %s: %.1f records/s, %.2f us CPU per record (user+sys %.0f us, kernel %.0f us %v), throttle flag errors %d (busy %d/%d, light %d/%d), missed vs kernel %d, dropped %d, %.1f throttle events/s\n",
			r.Name, r.PerS, r.CPUUsPerRec, r.UserSysUs, r.KernelUs, r.PartsUs, r.FlagErrors, r.BusyErrors, r.BusyRecords,
			r.LightErrors, r.LightRecords, r.VsKernel, r.Dropped, r.EventsPerS)
	}
	return nil
}

func trunc(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}

// ratios puts the OOM rescue figures of cgroupfs over the kernel's (the
// raised-timeout run), measured in the same run (unitless; > 1 means the
// kernel backend is that many times faster). telebench.Ratios does the
// telemetry ones.
func ratios(sum map[string]any) {
	f := func(k string) (float64, bool) {
		v, ok := sum[k].(float64)
		return v, ok && v > 0
	}
	for _, p := range []string{"p50", "p99"} {
		k, ok1 := f("oom_rescue_" + p + "_us")
		c, ok2 := f("cgroupfs_oom_rescue_" + p + "_us")
		if ok1 && ok2 {
			sum["ratio_oom_rescue_"+p+"_cgroupfs_over_kernel"] = c / k
		}
		// Like for like: the slowest page touches, one per grant, on both.
		if st, ok := f("cgroupfs_oom_stall_" + p + "_us"); ok1 && ok {
			sum["ratio_oom_stall_"+p+"_cgroupfs_over_kernel"] = st / k
		}
	}
}

// benchOOM: a hog touches 48 MiB under memory.max 16 MiB; each OOM request
// is granted after raising the limit by 1 MiB. The hog times every page
// touch; the slowest touches, one per grant, are the rescued charges.
func benchOOM(sum map[string]any) error {
	restore, err := setOOMTimeout(2000) // measure latency, not timeouts
	if err != nil {
		return err
	}
	defer restore()
	cg, err := newCgroup("bench-oom")
	if err != nil {
		return err
	}
	defer cg.remove()
	if err := cg.set("memory.max", strconv.Itoa(16<<20)); err != nil {
		return err
	}
	ctl, err := kmod.DialOwner()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.Watch(cg.id); err != nil {
		return err
	}
	defer func() { _ = ctl.Unwatch(cg.id) }()
	lat := "/tmp/bench-oom-lat"
	hog, err := cg.start("hog-mem-timed", "48", lat)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _, _ = waitTimeout(hog, 120*time.Second); close(exited) }()
	grants := 0
loop:
	for {
		select {
		case req := <-ctl.Requests():
			if req.CgroupID != cg.id {
				continue
			}
			if err := cg.set("memory.max", strconv.FormatUint(req.MaxBytes+1<<20, 10)); err != nil {
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
	n := atoiArg(args, 0, 48)
	b := make([]byte, n<<20)
	lat := make([]string, 0, len(b)/4096)
	for i := 0; i < len(b); i += 4096 {
		t := time.Now()
		b[i] = 1
		lat = append(lat, strconv.FormatFloat(float64(time.Since(t).Nanoseconds())/1e3, 'f', 1, 64))
	}
	if len(args) > 1 {
		if err := os.WriteFile(args[1], []byte(strings.Join(lat, "\n")), 0o644); err != nil {
			fmt.Println("hog-mem-timed:", err)
			return 1
		}
	}
	return 0
}

// benchOOMEscrad: the seed's path — blocked in try_charge_memcg → escra.ko
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
		restore, err := setOOMTimeout(2000)
		if err != nil {
			return err
		}
		defer restore()
		deadline = time.Second
	}
	sum[prefix+"oom_rescue_timeout_ms"], _ = strconv.Atoi(strings.TrimSpace(readProc("/sys/module/escra/parameters/oom_timeout_ms")))
	var st0 kmod.Stats
	if c, err := kmod.Dial(); err == nil {
		st0, _ = c.Stats()
		c.Close()
	}
	cg, err := newCgroup("bench-e2e")
	if err != nil {
		return err
	}
	defer cg.remove()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := startController(ctx, 1<<20, server.AppSpec{Name: "benchapp", CPUCores: 1, MemoryBytes: 256 << 20, Sigma: 0.75})
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Config{HostID: "vm", Controller: srv.TCPAddr(), Period: 100 * time.Millisecond,
		Backend: agent.BackendKernel, KernelSource: kmod.NewSource, Log: quiet, OOMDeadline: deadline,
		Cgroups: []containers.CgroupSpec{{Name: "bench-e2e", App: "benchapp", Path: "/bench-e2e"}}})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mb, err := registered(srv, "bench-e2e", cg)
	if err != nil {
		return err
	}
	boot := mb.MemoryLimitBytes
	lat := "/tmp/bench-e2e-lat"
	hog, err := cg.start("hog-mem-timed", strconv.FormatInt(boot>>20+32, 10), lat)
	if err != nil {
		return err
	}
	ps, err := waitTimeout(hog, 120*time.Second)
	if err != nil {
		return err
	}
	var grants uint64
	for _, c := range srv.Snapshot().Containers {
		if c.Name == "bench-e2e" {
			grants = c.OOMGrants
		}
	}
	if !ps.Success() {
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
