package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// absentLimit is memory.max in the no-controller cases: the brake sits at
// 24 MiB, and a hog that stops at fitBytes (its cgroup's memory.current,
// so the runtime's and the kernel's own charges count: ~9 MiB on Debian's
// kernel) is past the brake by a sixth — held there for minutes — yet fits.
const absentLimit, fitBytes = 32 << 20, 28 << 20

// scenarioCgroupfsOOMAbsent: no controller. (1) escrad cannot ask, so it
// releases the brake at once; a hog that needs more than memory.max is
// OOM-killed there and the brake is set again; a hog that fits between
// memory.high and memory.max completes at full speed (held by the brake it
// would crawl for minutes); escrad SIGKILLed → its OOM guard releases the
// brake. (2) A controller that stopped answering (a
// SIGSTOPped escra-controller process): after escrad's 1 s deadline the
// brake is released and the fitting hog completes. Never hung.
func scenarioCgroupfsOOMAbsent(e *harness.Env) error {
	cg, err := harness.NewCgroup("cf-absent")
	if err != nil {
		return err
	}
	defer cg.Remove()
	const limit = absentLimit
	if err := cg.Set("memory.max", strconv.Itoa(limit)); err != nil {
		return err
	}
	port, err := freePort() // nothing listens there
	if err != nil {
		return err
	}
	p, err := startEscrad("127.0.0.1:"+strconv.Itoa(port), [][3]string{{"cf-absent", "cfabsent", "/cf-absent"}})
	if err != nil {
		return err
	}
	defer p.stop()
	if err := harness.WaitBrake(cg, harness.BrakeFor(limit), 10*time.Second); err != nil {
		return err
	}
	big, err := runMemHog(cg, 96, 60*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("    no controller, hog 96 MiB over 32 MiB: %v after %v, memory.events high +%d, oom_kill +%d\n",
		big.ps, big.elapsed.Round(time.Millisecond), big.high, big.kills)
	if !harness.KilledBy(big.ps, syscall.SIGKILL) || big.kills == 0 {
		return fmt.Errorf("big hog %v, oom_kill +%d: want an OOM kill at memory.max", big.ps, big.kills)
	}
	if err := harness.WaitBrake(cg, harness.BrakeFor(limit), 5*time.Second); err != nil {
		return fmt.Errorf("brake not set again after the OOM kill: %w", err)
	}
	fit, err := runFitHog(cg, 60*time.Second)
	if err != nil {
		return err
	}
	high, _ := cg.Get("memory.high")
	fmt.Printf("    no controller, hog to 28 MiB (brake 24, max 32): %v after %v, memory.events high +%d, oom_kill +%d, memory.high %s\n",
		fit.ps, fit.elapsed.Round(time.Millisecond), fit.high, fit.kills, high)
	if !fit.ps.Success() || fit.kills != 0 || fit.high == 0 {
		return fmt.Errorf("fitting hog %v, oom_kill +%d, high +%d: want exit 0 after a brake event, no kill", fit.ps, fit.kills, fit.high)
	}
	if n := p.metric(`escrad_oom_outcomes_total{outcome="controller_unreachable"}`); n < 2 {
		return fmt.Errorf("escrad_oom_outcomes_total{outcome=\"controller_unreachable\"} %v, want >= 2", n)
	}
	// The fitting hog is gone: the watchdog sets the brake again.
	if err := harness.WaitBrake(cg, harness.BrakeFor(limit), 6*time.Second); err != nil {
		return fmt.Errorf("brake not set again once usage fell: %w", err)
	}
	// escrad dies by SIGKILL: its OOM guard releases the brake, so nothing
	// stays throttled for a daemon that is gone.
	_ = p.cmd.Process.Kill()
	if err := harness.WaitBrake(cg, "max", 5*time.Second); err != nil {
		return fmt.Errorf("escrad SIGKILLed: %w (its OOM guard must release the brake)", err)
	}
	if _, ok := p.logged(5*time.Second, "escrad oom guard", "cf-absent/memory.high"); !ok {
		return errors.New("the OOM guard did not log the brake it released")
	}
	fmt.Println("    escrad SIGKILLed: its OOM guard set memory.high back to max")
	p.stop()
	for _, keepState := range []bool{true, false} {
		if err := cgroupfsDoubleKillRestore(cg, limit, keepState); err != nil {
			return err
		}
	}
	return cgroupfsSilentController(e)
}

// runFitHog runs a hog that touches memory until its cgroup's
// memory.current reaches fitBytes, then exits 0.
func runFitHog(cg *harness.Cgroup, limit time.Duration) (*memOutcome, error) {
	return runHog(cg, limit, "hog-mem-until", strconv.Itoa(fitBytes))
}

// hogMemUntil touches pages until its own cgroup's memory.current reaches
// args[0] bytes (checked every 16 pages), then exits 0.
func hogMemUntil(args []string) int {
	target, _ := strconv.ParseInt(args[0], 10, 64)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 1
	}
	_, rel, _ := strings.Cut(strings.TrimSpace(string(b)), "::")
	cur := func() int64 {
		v, err := os.ReadFile(harness.CgroupRoot + rel + "/memory.current")
		if err != nil {
			return -1
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		return n
	}
	buf := make([]byte, 256<<20) // address space only: pages count when touched
	for i := 0; i < len(buf); i += 4096 {
		if i%(16*4096) == 0 {
			if c := cur(); c < 0 || c >= target {
				fmt.Printf("hog-mem-until: memory.current %d after touching %d MiB\n", c, i>>20)
				return 0
			}
		}
		buf[i] = 1
	}
	return 1
}

// guardPidRe finds the guard in escrad's start line.
var guardPidRe = regexp.MustCompile(`oom_guard_pid=(\d+)`)

// cgroupfsDoubleKillRestore is part (3) of scenarioCgroupfsOOMAbsent:
// escrad and its guard SIGKILLed together leave the brake on; `escrad
// restore-oom` with the same configuration releases it, from the state
// file, or, with that file gone, from the configured cgroups.
func cgroupfsDoubleKillRestore(cg *harness.Cgroup, limit int64, keepState bool) error {
	state := "/tmp/escrad-cf-absent.oom-armed"
	defer os.Remove(state)
	p, err := startEscrad("127.0.0.1:1", [][3]string{{"cf-absent", "cfabsent", "/cf-absent"}}, "--oom-state", state)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := harness.WaitBrake(cg, harness.BrakeFor(limit), 10*time.Second); err != nil {
		return err
	}
	l, ok := p.logged(5*time.Second, "escrad starting", "oom_guard_pid=")
	if !ok {
		return errors.New("escrad did not log its oom_guard_pid")
	}
	guard, _ := strconv.Atoi(guardPidRe.FindStringSubmatch(l)[1])
	// Both stopped first, so neither acts on the other's death.
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		_ = syscall.Kill(guard, sig)
		_ = p.cmd.Process.Signal(sig)
	}
	_, _ = harness.WaitTimeout(p.cmd, 5*time.Second)
	<-p.done
	time.Sleep(300 * time.Millisecond)
	if got, _ := cg.Get("memory.high"); got != harness.BrakeFor(limit) {
		return fmt.Errorf("memory.high %s after escrad and its guard were SIGKILLed, want the brake %s still on: the test no longer shows the window", got, harness.BrakeFor(limit))
	}
	if !keepState {
		if err := os.Remove(state); err != nil {
			return fmt.Errorf("state file: %w", err)
		}
	}
	out, err := exec.Command(escradBin, "restore-oom", "--config", "/tmp/escrad-cf-absent.yaml", "--oom-state", state).CombinedOutput()
	if err != nil {
		return fmt.Errorf("escrad restore-oom: %v\n%s", err, out)
	}
	if err := harness.WaitBrake(cg, "max", time.Second); err != nil {
		return fmt.Errorf("after escrad restore-oom (state file kept: %v): %w\n%s", keepState, err, out)
	}
	if !strings.Contains(string(out), "memory.high brake released") {
		return fmt.Errorf("escrad restore-oom did not say what it released:\n%s", out)
	}
	fmt.Printf("    escrad and its guard SIGKILLed: brake kept; escrad restore-oom (state file kept: %v) set memory.high back to max\n", keepState)
	return nil
}

// cgroupfsSilentController is part (2) of scenarioCgroupfsOOMAbsent.
func cgroupfsSilentController(*harness.Env) error {
	cg, err := harness.NewCgroup("cf-silent")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctl := exec.Command("/proc/self/exe", "controller", "cfsilent", strconv.Itoa(2*absentLimit))
	out, err := ctl.StdoutPipe()
	if err != nil {
		return err
	}
	ctl.Stderr = os.Stderr
	if err := ctl.Start(); err != nil {
		return err
	}
	defer func() {
		_ = ctl.Process.Signal(syscall.SIGCONT)
		_ = ctl.Process.Kill()
		_ = ctl.Wait()
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("controller process: %w", err)
	}
	p, err := startEscrad(strings.TrimSpace(addr), [][3]string{{"cf-silent", "cfsilent", "/cf-silent"}})
	if err != nil {
		return err
	}
	defer p.stop()
	const boot = absentLimit // (1 − σ) · budget
	if err := harness.WaitBrake(cg, harness.BrakeFor(boot), 20*time.Second); err != nil {
		return fmt.Errorf("bootstrap limit and brake: %w", err)
	}
	if err := ctl.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	fit, err := runFitHog(cg, 60*time.Second)
	if err != nil {
		return err
	}
	high, _ := cg.Get("memory.high")
	dl := p.metric(`escrad_oom_outcomes_total{outcome="deadline"}`)
	fmt.Printf("    stopped controller, hog to 28 MiB (brake 24, max 32): %v after %v, memory.events high +%d, oom_kill +%d, memory.high %s, deadline outcomes %v\n",
		fit.ps, fit.elapsed.Round(time.Millisecond), fit.high, fit.kills, high, dl)
	if !fit.ps.Success() || fit.kills != 0 || fit.high == 0 {
		return fmt.Errorf("hog %v, oom_kill +%d, high +%d: want exit 0 after a brake event, no kill", fit.ps, fit.kills, fit.high)
	}
	if dl < 1 {
		return fmt.Errorf("escrad_oom_outcomes_total{outcome=\"deadline\"} %v, want >= 1", dl)
	}
	if fit.elapsed < time.Second {
		return fmt.Errorf("hog done in %v, before the 1 s deadline: the brake did not hold it", fit.elapsed)
	}
	return nil
}

// controllerProc is the "controller" workload: escra-controller's server
// for one app (args: name, memory budget bytes; σ = 0.5) in its own
// process, so a scenario can stop it; prints its TCP address. Memory
// credit is off: the scenarios check what escrad does when its request
// finds no controller, not an answer from credit lent before it left.
func controllerProc(args []string) int {
	if len(args) < 2 {
		return 2
	}
	mem, _ := strconv.ParseInt(args[1], 10, 64)
	srv, err := harness.StartControllerNoCredit(context.Background(), 0, server.AppSpec{Name: args[0], CPUCores: 1, MemoryBytes: mem, Sigma: 0.5})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	fmt.Println(srv.TCPAddr())
	select {}
}
