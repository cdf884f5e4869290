// Command escra-vmtest is the guest half of vm-tests/run.sh: /init of the
// QEMU guest runs it on the patched kernel. It loads escra.ko, drives it
// through daemon/source/kmod the way escrad does, and checks what users care
// about: per-period CPU records (seed 000 §III, §IV-B), OOM rescue before
// the kill, clean unloads and strict netlink input handling.
//
// It prints "--- PASS"/"--- FAIL" lines on the serial console and exits
// non-zero when any scenario fails. The same binary also serves as the
// workloads (hog-cpu, busy, hog-mem) and the unprivileged client.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		if fn, ok := workloads[os.Args[1]]; ok {
			os.Exit(fn(os.Args[2:]))
		}
	}
	module := flag.String("module", "/escra.ko", "path of escra.ko")
	only := flag.String("run", "", "comma-separated scenario names (default: all)")
	bench := flag.String("bench", "", "run the benchmark instead and write its JSON here")
	flag.Parse()

	if err := setupCgroups(); err != nil {
		fmt.Println("--- FAIL: setup:", err)
		os.Exit(1)
	}
	if *bench != "" {
		if err := runBench(*module, *bench); err != nil {
			fmt.Println("--- FAIL: bench:", err)
			os.Exit(1)
		}
		return
	}

	want := map[string]bool{}
	for _, n := range strings.Split(*only, ",") {
		if n != "" {
			want[n] = true
		}
	}
	failed := 0
	ran := 0
	for _, s := range scenarios {
		if len(want) > 0 && !want[s.name] || len(want) == 0 && s.explicit {
			continue
		}
		ran++
		fmt.Printf("=== RUN   %s\n", s.name)
		start := time.Now()
		var err error
		if !s.explicit && !s.noModule && s.name != "load-unload" && !moduleLoaded() {
			// Subset runs (-run telemetry) skip load-unload, which loads it.
			err = loadModule(*module, "")
		}
		if err == nil {
			err = s.fn(&env{module: *module})
		}
		d := time.Since(start).Round(time.Millisecond)
		var skip skipError
		if errors.As(err, &skip) {
			fmt.Printf("--- SKIP: %s (%v): %s\n", s.name, d, string(skip))
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("--- FAIL: %s (%v): %v\n", s.name, d, err)
		} else {
			fmt.Printf("--- PASS: %s (%v)\n", s.name, d)
		}
	}
	fmt.Printf("escra-vmtest: %d scenarios, %d failed\n", ran, failed)
	if failed > 0 || ran == 0 {
		os.Exit(1)
	}
}

// skipError is a scenario that does not apply to this kernel (says why).
type skipError string

func (e skipError) Error() string { return string(e) }

type env struct {
	module string
}

type scenario struct {
	name     string
	fn       func(*env) error
	explicit bool // runs only when named (e.g. on the stock kernel)
	noModule bool // does not need escra.ko (also runs on the stock kernel)
}

// Order matters: load-unload leaves the module loaded with default
// parameters for the scenarios after it; dmesg runs last. The cgroupfs-*
// scenarios run escrad without the module: on the patched kernel (module
// loaded, unused) and again on Debian's stock kernel.
var scenarios = []scenario{
	{"load-unload", scenarioLoadUnload, false, false},
	{"telemetry", scenarioTelemetry, false, false},
	{"telemetry-drops", scenarioTelemetryDrops, false, false},
	{"oom-grant", scenarioOOMGrant, false, false},
	{"oom-deny", scenarioOOMDeny, false, false},
	{"oom-timeout", scenarioOOMTimeout, false, false},
	{"oom-noraise", scenarioOOMGrantNoRaise, false, false},
	{"bad-input", scenarioBadInput, false, false},
	{"kernel-source", scenarioKernelSource, false, false},
	{"escrad-e2e", scenarioEscradE2E, false, false},
	{"kmod-oom-pages", scenarioKmodOOMPages, false, false},
	{"cgroupfs-telemetry", scenarioCgroupfsTelemetry, false, true},
	{"cgroupfs-oom-grant", scenarioCgroupfsOOMGrant, false, true},
	{"cgroupfs-oom-deny", scenarioCgroupfsOOMDeny, false, true},
	{"cgroupfs-oom-absent", scenarioCgroupfsOOMAbsent, false, true},
	{"throttle-alternate", scenarioThrottleAlternate, false, false},
	{"owner", scenarioOwner, false, false},
	{"pagecache-oom", scenarioPageCacheOOM, false, false},
	{"pagecache-oom-ext4", scenarioPageCacheOOMExt4, false, false},
	{"v1-id", scenarioV1ID, false, false}, // moves cpu to v1 and back: last
	{"dmesg-clean", scenarioDmesgClean, false, false},
	{"stock-refusal", scenarioStockRefusal, true, false},
}

func atoiArg(args []string, i int, def int) int {
	if len(args) <= i {
		return def
	}
	n, err := strconv.Atoi(args[i])
	if err != nil {
		return def
	}
	return n
}
