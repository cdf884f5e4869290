package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioLoadUnload loads and unloads escra.ko 20 times; the 10th time an
// OOM waiter is blocked in the module when it unloads and must be released
// at once (not after its 20 s timeout), then OOM-killed as if no module
// were there.
func scenarioLoadUnload(e *harness.Env) error {
	if harness.ModuleLoaded() {
		if err := harness.UnloadModule(); err != nil {
			return err
		}
	}
	for i := 1; i <= 20; i++ {
		params := ""
		if i == 10 {
			params = "oom_timeout_ms=20000"
		}
		if err := harness.LoadModule(e.Module, params); err != nil {
			return fmt.Errorf("load %d: %w", i, err)
		}
		c, err := kmod.Dial()
		if err != nil {
			return fmt.Errorf("load %d: family not visible: %w", i, err)
		}
		_, err = c.Stats()
		c.Close()
		if err != nil {
			return fmt.Errorf("load %d: %w", i, err)
		}
		if i == 10 {
			err = unloadWithWaiter()
		} else {
			err = harness.UnloadModule()
		}
		if err != nil {
			return fmt.Errorf("unload %d: %w", i, err)
		}
		if harness.ModuleLoaded() {
			return fmt.Errorf("unload %d: /sys/module/escra still present", i)
		}
		if _, err := kmod.Dial(); !errors.Is(err, kmod.ErrNoFamily) {
			return fmt.Errorf("unload %d: family still resolvable (%v)", i, err)
		}
	}
	// Leave it loaded with default parameters for the next scenarios.
	return harness.LoadModule(e.Module, "")
}

func unloadWithWaiter() error {
	// The module was loaded with oom_timeout_ms=20000: left as it is.
	f, err := harness.NewOOMCgroup("ld-oom", 16<<20, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ctl := f.Owner
	hog, err := f.Start("hog-mem", "64")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	select {
	case req := <-ctl.Requests():
		fmt.Printf("    waiter pending: request %d for cgroup %d (usage %d, max %d)\n", req.ID, req.CgroupID, req.UsageBytes, req.MaxBytes)
	case <-time.After(60 * time.Second):
		return errors.New("no OOM request from the hog within 60s")
	}
	t0 := time.Now()
	if err := harness.UnloadModule(); err != nil {
		return err
	}
	d := time.Since(t0)
	fmt.Printf("    unload with a pending waiter took %v\n", d.Round(time.Millisecond))
	if d > 10*time.Second {
		return fmt.Errorf("unload took %v: the waiter was not released early", d)
	}
	ps, err := harness.WaitTimeout(hog, 60*time.Second)
	if err != nil {
		return fmt.Errorf("hog after unload: %w", err)
	}
	if !harness.KilledBy(ps, syscall.SIGKILL) {
		return fmt.Errorf("released hog: want OOM kill, got %v", ps)
	}
	return nil
}

// scenarioStockRefusal runs on Debian's stock kernel with escra.ko built
// against its headers: the stub refuses to load with EOPNOTSUPP and a log
// line, and user space sees no family (kmod.ErrNoFamily) — escrad's cue
// to fall back to cgroupfs.
func scenarioStockRefusal(e *harness.Env) error {
	err := harness.LoadModule(e.Module, "")
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("loading on a stock kernel: got %v, want EOPNOTSUPP", err)
	}
	fmt.Println("    insmod:", err)
	if harness.ModuleLoaded() {
		return errors.New("/sys/module/escra exists after the refusal")
	}
	if _, err := kmod.Dial(); !errors.Is(err, kmod.ErrNoFamily) {
		return fmt.Errorf("kmod.Dial on a stock kernel: got %v, want ErrNoFamily", err)
	}
	fmt.Println("    kmod.Dial:", kmod.ErrNoFamily)
	log, err := harness.Dmesg()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "escra: this kernel lacks the Escra hooks") {
			fmt.Println("    dmesg:", line)
			return nil
		}
	}
	return errors.New("no refusal line from escra in the kernel log")
}

// scenarioDmesgClean fails on any WARN/BUG/oops the run left in the log.
func scenarioDmesgClean(*harness.Env) error {
	log, err := harness.Dmesg()
	if err != nil {
		return err
	}
	if line := harness.FindSplat(log); line != "" {
		fmt.Println(log)
		return fmt.Errorf("kernel log has a splat: %s", line)
	}
	return nil
}
