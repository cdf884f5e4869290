// Command bench-kernel-guest is the guest half of make bench-kernel: with
// VMTEST_BENCH set, vm-tests/run.sh packs it into the QEMU guest's
// initramfs and /init runs it instead of the scenarios. It writes the
// summary JSON that run.sh copies out between the ESCRA-BENCH-JSON markers.
// The same binary serves as its workloads.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/escra-dev/escra/bench/telebench"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// workloads are the subcommands the benchmark starts inside cgroups.
var workloads = map[string]harness.Workload{
	"hog-cpu":       harness.HogCPU,
	"duty":          duty,
	"hog-mem-timed": hogMemTimed,
	"hog-mem-trace": hogMemTrace,
}

func main() {
	harness.RunWorkload(workloads)
	module := flag.String("module", "/escra.ko", "path of escra.ko")
	out := flag.String("out", "/tmp/summary.json", "where to write the summary JSON")
	flag.Parse()
	if err := harness.SetupCgroups(); err != nil {
		fmt.Println("--- FAIL: setup:", err)
		os.Exit(1)
	}
	if err := runBench(*module, *out); err != nil {
		fmt.Println("--- FAIL: bench:", err)
		os.Exit(1)
	}
}

// runBench measures the kernel path inside the VM (make bench-kernel):
// the kernel and cgroupfs telemetry backends side by side at a 100 ms
// period on 100 groups (bench/telebench, the code bench-bpf runs on the
// host), and how long a charge stays blocked when a handler grants by
// raising memory.max: first with the defaults a user gets (escra.ko's
// oom_timeout_ms, escrad's verdict deadline), then with both raised so a
// slow emulated round trip shows as latency. Under TCG absolute times are
// inflated; compare ratios, or runs on the same host.
func runBench(module, out string) error {
	if !harness.ModuleLoaded() {
		if err := harness.LoadModule(module, ""); err != nil {
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
	sum["guest_cpus"] = strings.Count(harness.ReadProc("/proc/cpuinfo"), "processor\t:")
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return os.WriteFile(out, append(b, '\n'), 0o644)
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
