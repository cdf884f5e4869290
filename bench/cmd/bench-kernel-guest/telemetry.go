package main

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/escra-dev/escra/bench/telebench"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

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
	var cgs []*harness.Cgroup
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
			cg.Remove()
		}
	}()
	for i := 0; i < benchGroups; i++ {
		cg, err := harness.NewCgroup(fmt.Sprintf("bench-tel-%03d", i))
		if err != nil {
			return err
		}
		cgs = append(cgs, cg)
		busy := i < benchBusy
		quota, work := telebench.LightQuotaUs, []string{"duty"}
		if busy {
			quota, work = telebench.BusyQuotaUs, []string{"hog-cpu"}
		}
		if err := cg.Set("cpu.max", fmt.Sprintf("%d %d", quota, benchPeriod.Microseconds())); err != nil {
			return err
		}
		p, err := cg.Start(work...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		g, err := cgroups.Open(cgroups.Paths{Version: cgroups.V2, Unified: cg.Path})
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
				Counts:  map[string]uint64{"hook_calls": st.HookCalls, "records_sent": st.RecordsSent, "events": st.Events}}
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
		strings.Count(harness.ReadProc("/proc/cpuinfo"), "processor\t:"), strings.TrimSpace(harness.ReadProc("/proc/sys/kernel/osrelease")))
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

// duty is a light group's load in the telemetry benchmark: telebench.LightDuty
// of every 100 ms, until killed (the host runs workloads/spin -duty).
func duty([]string) int {
	telebench.Duty(telebench.LightDuty, 100*time.Millisecond)
	return 0
}
