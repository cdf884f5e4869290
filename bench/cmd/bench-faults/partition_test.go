package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// partitionRuns is how many partition steps in a row must keep the budget:
// 3 in make test (about a minute each), ESCRA_PARTITION_RUNS for more (5
// is the fault bench's acceptance loop).
var partitionRuns = func() int {
	if n, err := strconv.Atoi(os.Getenv("ESCRA_PARTITION_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}()

// The budget holds through a partition, every run: the fault bench's
// partition step (a real controller with TLS, two real Docker engines, a
// real escrad each, h1's cut from the controller by nft rules in its
// network namespace for 30 s, memhogs in both containers) partitionRuns
// times in a row, and in none of them does Σ of the limits in the
// containers' cgroup files (sampled every 100 ms) exceed the app's
// budget: neither while escrad keeps the controller's limits nor once it
// has put Docker's back, nor when h1 rejoins. About a minute a run; root,
// dockerd and nft (scripts/setup.sh); not in -short.
func TestPartitionBudgetHoldsEveryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute a run (-short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: engines, network namespaces, nft")
	}
	for _, tool := range []string{"dockerd", "nft", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh)", tool)
		}
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(root) // scripts/hosts.sh, as make bench-faults runs it
	*bin = t.TempDir()
	for _, p := range []string{"escrad", "escra-controller", "escractl"} {
		pkg := "./controller/cmd/" + p
		if p == "escrad" {
			pkg = "./daemon/cmd/escrad"
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(*bin, p), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	tmp = t.TempDir()
	t.Cleanup(func() { cleanup(); stopEngines("") })
	if err := startEngines(2); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= partitionRuns; run++ {
		summary = map[string]any{}
		err := partitionSection()
		cleanup()
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		v, all, n := summary["budget_violations"], summary["budget_violations_incl_restored_groups"], summary["budget_samples"]
		t.Logf("run %d: %v of %v samples over the budget (%v counting groups escrad put back to Docker's limits); h1 cut off after %vs, %v of its OOMs released",
			run, v, n, all, summary["partition_detect_s"], summary["partition_oom_events"])
		if v != 0 || all != 0 {
			t.Errorf("run %d: Σ applied limits over the budget in %v samples (%v with the restored group) of %v", run, v, all, n)
		}
		if s, _ := n.(int); s < 200 {
			t.Errorf("run %d: only %v budget samples", run, n)
		}
	}
}
