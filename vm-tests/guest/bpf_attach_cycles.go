package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/escra-dev/escra/daemon/source/bpf"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioBPFAttachCycles loads, attaches and detaches the bpf backend
// escra_bpf_cycles times (default 20) while a throttled hog keeps the CFS
// period timer firing and a second process sleeps and wakes on the other
// CPU. Each attach patches live kernel text (the fentry/fexit sites and
// the sched_switch tracepoint) under the code the other CPU runs: the
// moment the stock 6.12 boot once oopsed in. A kernel that oopses here
// panics the guest (panic_on_oops), which fails the boot.
func scenarioBPFAttachCycles(*harness.Env) error {
	if !bpf.Built() {
		return bpf.ErrNotBuilt
	}
	n := 20
	if v, err := strconv.Atoi(os.Getenv("escra_bpf_cycles")); err == nil && v > 0 {
		n = v
	}
	cg, err := harness.NewCgroup("bpf-cycles")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("cpu.max", "20000 100000"); err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
		}
	}()
	for _, args := range [][]string{{"hog-cpu"}, {"busy", "1", "2"}} {
		p, err := cg.Start(args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	start := time.Now()
	for i := range n {
		src, err := bpf.New(nil)
		if err != nil {
			return fmt.Errorf("cycle %d: %w", i+1, err)
		}
		// Run on a cancelled context returns at once and detaches; its
		// error is only the closed ring buffer.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = src.Run(ctx, &recSink{})
	}
	fmt.Printf("    bpf attach cycles: %d attach/detach cycles in %.1fs under a throttled hog, no oops\n",
		n, time.Since(start).Seconds())
	return nil
}
