package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/source/bpf"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioBPFTelemetry: escrad's bpf backend, the one for stock kernels
// with BTF, on the kernel it is meant for (Debian's, booted in the guest)
// on cgroup v2 and on a v1 cpu hierarchy: per-period stats for a hog at a
// 20 ms quota read as throttled at their quota, and its throttle events
// reach escrad before the record of the period they name.
func scenarioBPFTelemetry(*harness.Env) error {
	if !bpf.Built() {
		return bpf.ErrNotBuilt
	}
	src, err := bpf.NewSource(100*time.Millisecond, nil)
	if err != nil {
		return err
	}
	cg, err := harness.NewCgroup("bpf-v2")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("cpu.max", "20000 100000"); err != nil {
		return err
	}
	if err := backendEvents("bpf backend, cgroup v2", src, cgroups.Paths{Version: cgroups.V2, Unified: cg.Path},
		func() (*exec.Cmd, error) { return cg.Start("hog-cpu") }); err != nil {
		return err
	}
	return withCPUOnV1(func(v1root string) error {
		src, err := bpf.NewSource(100*time.Millisecond, nil)
		if err != nil {
			return err
		}
		g := filepath.Join(v1root, "bpf-v1")
		if err := os.Mkdir(g, 0o755); err != nil {
			return err
		}
		defer func() { _ = os.Remove(g) }()
		for _, f := range [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "20000"}} {
			if err := os.WriteFile(filepath.Join(g, f[0]), []byte(f[1]), 0o644); err != nil {
				return fmt.Errorf("%s: %w", f[0], err)
			}
		}
		return backendEvents("bpf backend, cgroup v1", src, cgroups.Paths{Version: cgroups.V1, CPU: g},
			func() (*exec.Cmd, error) {
				hog := exec.Command("/proc/self/exe", "hog-cpu")
				if err := hog.Start(); err != nil {
					return nil, err
				}
				if err := os.WriteFile(filepath.Join(g, "cgroup.procs"), []byte(strconv.Itoa(hog.Process.Pid)), 0o644); err != nil {
					_ = hog.Process.Kill()
					_, _ = hog.Process.Wait()
					return nil, err
				}
				return hog, nil
			})
	})
}
