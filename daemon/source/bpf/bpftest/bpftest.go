// Package bpftest is for tests that need the bpf backend's BPF object
// (daemon/source/bpf/obj/, built by scripts/bpf.sh, not tracked).
package bpftest

import (
	"os"
	"testing"
)

// NeedObject skips the test when the object was not built into the test
// binary (built is bpf.Built()), with a message saying how to build it;
// under CI=true it fails instead, so CI cannot pass with the bpf tests
// skipped (scripts/test.sh builds the object first).
func NeedObject(t testing.TB, built bool) {
	t.Helper()
	if built {
		return
	}
	msg := "the BPF object is not built (daemon/source/bpf/obj/cfs_bpfel.o): run scripts/bpf.sh or make build (needs clang and libbpf-dev)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true: a missing object fails the test instead of skipping it")
	}
	t.Skip(msg)
}
