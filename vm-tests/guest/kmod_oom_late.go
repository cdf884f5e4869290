package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source/kmod"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// scenarioOOMLateVerdict: a verdict that arrives after escra.ko's
// oom_timeout_ms, at the shipped default (100 ms). The module has given
// up: the task met the memcg OOM killer, the module counted a timeout,
// and escrad's kernel backend must report the grant as late
// (rescue.ErrLate, which the agent counts as escrad_oom_late_grants_total
// and logs) instead of dropping the error.
func scenarioOOMLateVerdict(*harness.Env) error {
	const param = "/sys/module/escra/parameters/oom_timeout_ms"
	if v := strings.TrimSpace(harness.ReadProc(param)); v != "100" {
		return fmt.Errorf("oom_timeout_ms is %s: this scenario runs the shipped default, 100", v)
	}
	src, err := kmod.NewSource(100*time.Millisecond, nil)
	if err != nil {
		return err
	}
	cg, err := harness.NewCgroup("oom-late")
	if err != nil {
		return err
	}
	defer cg.Remove()
	if err := cg.Set("memory.max", strconv.Itoa(32<<20)); err != nil {
		return err
	}
	g, err := cgroups.Open(cgroups.Paths{Version: cgroups.V2, Unified: cg.Path})
	if err != nil {
		return err
	}
	defer g.Close()
	const h = 11
	if err := src.Watch(h, g); err != nil {
		return err
	}
	c, err := kmod.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	st0, err := c.Stats()
	if err != nil {
		return err
	}

	// Answer the first event ten timeouts late (a controller that is slow
	// or far away), the way the agent does: raise, then Resolve granted.
	var once sync.Once
	var wg sync.WaitGroup
	resolved := make(chan error, 1)
	events := 0
	var mu sync.Mutex
	sink := &recSink{onOOM: func(ev rescue.Event) {
		mu.Lock()
		events++
		mu.Unlock()
		once.Do(func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Second)
				if err := cg.Set("memory.max", strconv.FormatInt(ev.Limit+16<<20, 10)); err != nil {
					resolved <- err
					return
				}
				resolved <- src.Resolve(ev, true, ev.Limit+16<<20)
			}()
		})
	}}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(ctx, sink) }()
	defer func() { wg.Wait(); cancel(); <-runDone }()

	start := time.Now()
	hog, err := cg.Start("hog-mem", "64")
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(hog, 60*time.Second)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	var rerr error
	select {
	case rerr = <-resolved:
	case <-time.After(5 * time.Second):
		return errors.New("no OOM event reached the kernel backend")
	}
	kills, err := cg.Keyed("memory.events", "oom_kill")
	if err != nil {
		return err
	}
	st1, err := c.Stats()
	if err != nil {
		return err
	}
	fmt.Printf("    late verdict: hog %v after %v, oom_kill %d, module timeouts +%d, %d events, Resolve: %v\n",
		ps, elapsed.Round(time.Millisecond), kills, st1.OOMTimeouts-st0.OOMTimeouts, events, rerr)
	if !harness.KilledBy(ps, syscall.SIGKILL) || kills == 0 {
		return fmt.Errorf("hog %v, oom_kill %d: past the module's timeout the OOM killer must run", ps, kills)
	}
	if st1.OOMTimeouts == st0.OOMTimeouts {
		return errors.New("the module counted no timeout")
	}
	if !errors.Is(rerr, rescue.ErrLate) {
		return fmt.Errorf("Resolve after the timeout returned %v, want rescue.ErrLate", rerr)
	}
	src.Unwatch(h)
	return ctxErr(runDone)
}
