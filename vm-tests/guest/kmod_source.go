package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source/kmod"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// recSink records what escrad's kernel backend hands the agent, and when.
type recSink struct {
	mu    sync.Mutex
	stats []*pb.CpuStat
	at    []time.Time
	onOOM func(rescue.Event)
}

func (s *recSink) CPU(st *pb.CpuStat) {
	s.mu.Lock()
	c := &pb.CpuStat{Handle: st.Handle, PeriodSeq: st.PeriodSeq, QuotaUs: st.QuotaUs, PeriodUs: st.PeriodUs,
		UnusedUs: st.UnusedUs, Throttled: st.Throttled, NrThrottled: st.NrThrottled, ThrottledUs: st.ThrottledUs,
		UsageUs: st.UsageUs, MidPeriod: st.MidPeriod}
	s.stats = append(s.stats, c)
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

func (s *recSink) Flush() {}

func (s *recSink) OOM(ev rescue.Event) {
	if s.onOOM != nil {
		s.onOOM(ev)
	}
}

func (s *recSink) snapshot() []*pb.CpuStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*pb.CpuStat(nil), s.stats...)
}

// scenarioKernelSource drives escrad's kernel backend (kmod.Source, the
// source.Source the agent uses) on the real module: per-period stats
// for a throttled hog, and an OOM event resolved as the agent does (raise
// memory.max, then Resolve granted). The controller leg is not in the VM.
func scenarioKernelSource(*harness.Env) error {
	restore, err := harness.SetOOMTimeout(2000)
	if err != nil {
		return err
	}
	defer restore()
	src, err := kmod.NewSource(100*time.Millisecond, nil)
	if err != nil {
		return err
	}
	cpuCg, err := harness.NewCgroup("src-cpu")
	if err != nil {
		return err
	}
	defer cpuCg.Remove()
	memCg, err := harness.NewCgroup("src-mem")
	if err != nil {
		return err
	}
	defer memCg.Remove()
	if err := cpuCg.Set("cpu.max", "20000 100000"); err != nil {
		return err
	}
	if err := memCg.Set("memory.max", strconv.Itoa(32<<20)); err != nil {
		return err
	}
	var groups []*cgroups.Group
	for _, cg := range []*harness.Cgroup{cpuCg, memCg} {
		g, err := cgroups.Open(cgroups.Paths{Version: cgroups.V2, Unified: cg.Path})
		if err != nil {
			return err
		}
		groups = append(groups, g)
		defer g.Close()
	}
	const hCPU, hMem = 7, 8
	if err := src.Watch(hCPU, groups[0]); err != nil {
		return err
	}
	if err := src.Watch(hMem, groups[1]); err != nil {
		return err
	}
	var resolveErr error
	granted := 0
	sink := &recSink{onOOM: func(ev rescue.Event) {
		if ev.Handle != hMem {
			return
		}
		newMax := ev.Limit + 16<<20
		if err := memCg.Set("memory.max", strconv.FormatInt(newMax, 10)); err != nil {
			resolveErr = err
			_ = src.Resolve(ev, false, 0)
			return
		}
		if err := src.Resolve(ev, true, newMax); err != nil {
			resolveErr = err
		}
		granted++
	}}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(ctx, sink) }()
	defer func() { cancel(); <-runDone }()

	hog, err := cpuCg.Start("hog-cpu")
	if err != nil {
		return err
	}
	defer func() { _ = hog.Process.Kill(); _, _ = hog.Process.Wait() }()
	mem, err := memCg.Start("hog-mem", "64")
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(mem, 60*time.Second)
	if err != nil {
		return fmt.Errorf("memory hog: %w", err)
	}
	if resolveErr != nil {
		return resolveErr
	}
	kills, err := memCg.Keyed("memory.events", "oom_kill")
	if err != nil {
		return err
	}
	if !ps.Success() || kills != 0 || granted == 0 {
		return fmt.Errorf("memory hog %v, oom_kill %d, %d grants: want exit 0, no kill, >= 1 grant", ps, kills, granted)
	}
	time.Sleep(2 * time.Second)
	var mine []*pb.CpuStat
	for _, st := range sink.snapshot() {
		// Throttle events (mid-period) are kmod-throttle-events' subject.
		if st.Handle == hCPU && !st.MidPeriod {
			mine = append(mine, st)
		}
	}
	if len(mine) < 10 {
		return fmt.Errorf("%d stats for the CPU hog, want >= 10", len(mine))
	}
	last := mine[len(mine)-1]
	for _, st := range mine[1:] {
		if !st.Throttled || st.UsageUs < 16000 || st.QuotaUs != 20000 || st.PeriodUs != 100000 {
			return fmt.Errorf("CPU hog stat %v: want throttled, usage ~20 ms of a 20 ms quota", st)
		}
	}
	fmt.Printf("    kernel backend: %d CpuStats (last: seq %d usage %d us unused %d us throttled %v), %d OOM grants, hog exit 0\n",
		len(mine), last.PeriodSeq, last.UsageUs, last.UnusedUs, last.Throttled, granted)
	src.Unwatch(hCPU)
	src.Unwatch(hMem)
	if err := ctxErr(runDone); err != nil {
		return err
	}
	return nil
}

// ctxErr reports an early Run failure without waiting.
func ctxErr(done chan error) error {
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("agent returned before its context ended")
		}
		done <- err
		return err
	default:
		return nil
	}
}
