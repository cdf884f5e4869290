package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

type oomResult struct {
	ps       *os.ProcessState
	elapsed  time.Duration
	requests int
	oomKills uint64
	before   kmod.Stats
	after    kmod.Stats
}

// runOOM puts a 64 MiB hog in a cgroup with memory.max 32 MiB while a
// handler (escrad's role) answers the module's OOM requests.
func runOOM(name string, timeoutMs int, handle func(ctl *kmod.Owner, cg *harness.Cgroup, req kmod.OOMRequest) error) (*oomResult, error) {
	f, err := harness.NewOOMCgroup(name, 32<<20, timeoutMs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cg, ctl := f.Cgroup, f.Owner
	res := &oomResult{}
	if res.before, err = ctl.Stats(); err != nil {
		return nil, err
	}

	start := time.Now()
	hog, err := cg.Start("hog-mem", "64")
	if err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		res.ps, waitErr = harness.WaitTimeout(hog, 60*time.Second)
		close(exited)
	}()
	var handleErr error
loop:
	for {
		select {
		case req := <-ctl.Requests():
			if req.CgroupID != cg.ID {
				continue
			}
			res.requests++
			if err := handle(ctl, cg, req); err != nil && handleErr == nil {
				handleErr = err
			}
		case <-exited:
			break loop
		}
	}
	res.elapsed = time.Since(start)
	if waitErr != nil {
		return nil, waitErr
	}
	if handleErr != nil {
		return nil, handleErr
	}
	if res.oomKills, err = cg.Keyed("memory.events", "oom_kill"); err != nil {
		return nil, err
	}
	if res.after, err = ctl.Stats(); err != nil {
		return nil, err
	}
	fmt.Printf("    %s: %d requests, hog %v after %v, oom_kill %d, memory.max now %s\n",
		name, res.requests, res.ps, res.elapsed.Round(time.Millisecond), res.oomKills, harness.Must(cg.Get("memory.max")))
	return res, nil
}

// scenarioOOMGrant: the handler raises memory.max, then grants; the hog
// completes with exit 0 and no OOM kill (Escra §III, reactive memory).
func scenarioOOMGrant(*harness.Env) error {
	res, err := runOOM("oom-grant", 2000, func(ctl *kmod.Owner, cg *harness.Cgroup, req kmod.OOMRequest) error {
		newMax := req.MaxBytes + 16<<20
		if err := cg.Set("memory.max", strconv.FormatUint(newMax, 10)); err != nil {
			_ = ctl.ReplyOOM(req.ID, false)
			return err
		}
		return ctl.ReplyOOM(req.ID, true)
	})
	if err != nil {
		return err
	}
	if !res.ps.Success() {
		return fmt.Errorf("hog: %v, want exit 0", res.ps)
	}
	if res.oomKills != 0 {
		return fmt.Errorf("oom_kill %d, want 0", res.oomKills)
	}
	if res.requests == 0 || res.after.OOMGranted == res.before.OOMGranted {
		return fmt.Errorf("no granted request (requests %d, granted %d->%d)", res.requests, res.before.OOMGranted, res.after.OOMGranted)
	}
	return nil
}

// scenarioOOMDeny: a denial lets the normal OOM path kill the hog.
func scenarioOOMDeny(*harness.Env) error {
	res, err := runOOM("oom-deny", 2000, func(ctl *kmod.Owner, _ *harness.Cgroup, req kmod.OOMRequest) error {
		return ctl.ReplyOOM(req.ID, false)
	})
	if err != nil {
		return err
	}
	if !harness.KilledBy(res.ps, syscall.SIGKILL) || res.oomKills == 0 {
		return fmt.Errorf("hog %v, oom_kill %d: want an OOM kill", res.ps, res.oomKills)
	}
	if res.requests == 0 {
		return errors.New("the module sent no OOM request")
	}
	return nil
}

// scenarioOOMGrantNoRaise: a daemon that grants without raising
// memory.max cannot keep a task faulting forever: the kernel gives a task
// four verdicts per value of memory.max, then the OOM path runs.
func scenarioOOMGrantNoRaise(*harness.Env) error {
	res, err := runOOM("oom-noraise", 2000, func(ctl *kmod.Owner, _ *harness.Cgroup, req kmod.OOMRequest) error {
		err := ctl.ReplyOOM(req.ID, true)
		if errors.Is(err, unix.ENOENT) {
			return nil // the task was killed meanwhile
		}
		return err
	})
	if err != nil {
		return err
	}
	if !harness.KilledBy(res.ps, syscall.SIGKILL) || res.oomKills == 0 {
		return fmt.Errorf("hog %v, oom_kill %d: want an OOM kill after the bounded rounds", res.ps, res.oomKills)
	}
	// Four per faulting thread; the Go hog faults from one or two.
	if res.requests == 0 || res.requests > 12 {
		return fmt.Errorf("%d requests for grants that raised nothing, want 1..12 (4 per faulting thread)", res.requests)
	}
	return nil
}

// scenarioOOMTimeout: nobody answers (controller absent); after
// oom_timeout_ms the OOM killer runs, well within the deadline.
func scenarioOOMTimeout(*harness.Env) error {
	res, err := runOOM("oom-timeout", 100, func(*kmod.Owner, *harness.Cgroup, kmod.OOMRequest) error { return nil })
	if err != nil {
		return err
	}
	if !harness.KilledBy(res.ps, syscall.SIGKILL) || res.oomKills == 0 {
		return fmt.Errorf("hog %v, oom_kill %d: want an OOM kill", res.ps, res.oomKills)
	}
	if res.after.OOMTimeouts == res.before.OOMTimeouts {
		return errors.New("module counted no timeout")
	}
	const deadline = 10 * time.Second
	if res.elapsed > deadline {
		return fmt.Errorf("OOM kill after %v, deadline %v", res.elapsed, deadline)
	}
	return nil
}
