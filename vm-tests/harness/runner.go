// Package harness is the QEMU guest's test machinery for vm-tests/run.sh
// and the kernel benchmark's guest: the scenario runner and its
// "--- PASS"/"--- FAIL" lines (scripts/test.sh and run.sh grep them),
// cgroup v2 fixtures, escra.ko and kernel-log helpers, the controller on
// loopback and the workload subcommands a guest binary re-executes itself
// for inside cgroups.
package harness

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Skip is a scenario that does not apply to this kernel (says why).
type Skip string

func (e Skip) Error() string { return string(e) }

// Env is what a scenario gets from the runner.
type Env struct {
	Module string // path of escra.ko
}

// Scenario is one named check. Its name is printed in the result lines
// and named by VMTEST_RUN, run.sh and docs/kernel.md.
type Scenario struct {
	Name     string
	Fn       func(*Env) error
	Explicit bool // runs only when named (e.g. on the stock kernel)
	NoModule bool // does not need escra.ko (also runs on the stock kernel)
}

// Run sets up cgroup v2, runs the scenarios in order (only the ones named
// in the comma-separated only, when given) and prints one "=== RUN" and one
// "--- PASS", "--- FAIL" or "--- SKIP" line each, then a summary. It
// returns the exit status: 0 only when at least one ran and none failed.
func Run(scenarios []Scenario, module, only string) int {
	if err := SetupCgroups(); err != nil {
		fmt.Println("--- FAIL: setup:", err)
		return 1
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n != "" {
			want[n] = true
		}
	}
	failed := 0
	ran := 0
	for _, s := range scenarios {
		if len(want) > 0 && !want[s.Name] || len(want) == 0 && s.Explicit {
			continue
		}
		ran++
		fmt.Printf("=== RUN   %s\n", s.Name)
		start := time.Now()
		var err error
		if !s.Explicit && !s.NoModule && s.Name != "load-unload" && !ModuleLoaded() {
			// Subset runs (-run telemetry) skip load-unload, which loads it.
			err = LoadModule(module, "")
		}
		if err == nil {
			err = s.Fn(&Env{Module: module})
		}
		d := time.Since(start).Round(time.Millisecond)
		var skip Skip
		if errors.As(err, &skip) {
			fmt.Printf("--- SKIP: %s (%v): %s\n", s.Name, d, string(skip))
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("--- FAIL: %s (%v): %v\n", s.Name, d, err)
		} else {
			fmt.Printf("--- PASS: %s (%v)\n", s.Name, d)
		}
	}
	fmt.Printf("escra-vmtest: %d scenarios, %d failed\n", ran, failed)
	if failed > 0 || ran == 0 {
		return 1
	}
	return 0
}
