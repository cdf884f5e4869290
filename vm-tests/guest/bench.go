package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/escra-dev/escra/daemon/genl"
)

// runBench measures the kernel path inside the VM (make bench-kernel):
// telemetry throughput and drops with many short-period groups, the CFS
// hook's own cost (kernel clock, from the module's counters), and how long
// a charge stays blocked when a handler grants by raising memory.max.
// Under TCG absolute times are inflated; compare runs on the same host.
func runBench(module, out string) error {
	if !moduleLoaded() {
		if err := loadModule(module, ""); err != nil {
			return err
		}
	}
	sum := map[string]any{}
	if err := benchTelemetry(sum); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	if err := benchOOM(sum); err != nil {
		return fmt.Errorf("oom: %w", err)
	}
	sum["accel"] = "tcg"
	sum["guest_cpus"] = strings.Count(readProc("/proc/cpuinfo"), "processor\t:")
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

func benchTelemetry(sum map[string]any) error {
	const groups = 32
	const window = 5 * time.Second
	l, err := listen(genl.GroupTelemetry)
	if err != nil {
		return err
	}
	defer l.close()
	ctl, err := genl.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	var cgs []*cgroup
	defer func() {
		for _, cg := range cgs {
			_ = ctl.Unwatch(cg.id)
			cg.remove()
		}
	}()
	for i := 0; i < groups; i++ {
		cg, err := newCgroup(fmt.Sprintf("bench-tel-%d", i))
		if err != nil {
			return err
		}
		cgs = append(cgs, cg)
		// 1 ms of every 2 ms: 500 periods/s per group; 32 CPU hogs keep
		// both vCPUs saturated, the worst case for the drain work.
		if err := cg.set("cpu.max", "1000 2000"); err != nil {
			return err
		}
		if err := ctl.Watch(cg.id); err != nil {
			return err
		}
		p, err := cg.start("hog-cpu")
		if err != nil {
			return err
		}
		defer func() { _ = p.Process.Kill(); _, _ = p.Process.Wait() }()
	}
	time.Sleep(time.Second)
	l.drainRecords()
	s0, err := ctl.Stats()
	if err != nil {
		return err
	}
	t0 := time.Now()
	n := 0
	overruns := 0
	deadline := time.After(window)
loop:
	for {
		select {
		case <-l.recs:
			n++
		case <-l.overrun:
			overruns++
		case <-deadline:
			break loop
		}
	}
	el := time.Since(t0)
	s1, err := ctl.Stats()
	if err != nil {
		return err
	}
	calls := s1.HookCalls - s0.HookCalls
	sum["telemetry_groups"] = groups
	sum["telemetry_period_us"] = 2000
	sum["telemetry_records_per_s"] = float64(n) / el.Seconds()
	sum["telemetry_dropped"] = s1.RecordsDropped - s0.RecordsDropped
	sum["telemetry_socket_overruns"] = overruns
	// Periods the scheduler actually ended (hook calls), to tell a slow
	// producer (TCG timers) from a slow consumer.
	sum["telemetry_periods_per_s"] = float64(calls) / el.Seconds()
	sum["telemetry_records_sent"] = s1.RecordsSent - s0.RecordsSent
	if calls > 0 {
		sum["hook_cost_ns"] = float64(s1.HookNsTotal-s0.HookNsTotal) / float64(calls)
	}
	fmt.Printf("bench: telemetry %d records in %v from %d groups, dropped %d, hook %v ns/call\n",
		n, el.Round(time.Millisecond), groups, s1.RecordsDropped-s0.RecordsDropped, sum["hook_cost_ns"])
	return nil
}

// benchOOM: a hog touches 48 MiB under memory.max 16 MiB; each OOM request
// is granted after raising the limit by 1 MiB. The hog times every page
// touch; the slowest touches, one per grant, are the rescued charges.
func benchOOM(sum map[string]any) error {
	cg, err := newCgroup("bench-oom")
	if err != nil {
		return err
	}
	defer cg.remove()
	if err := cg.set("memory.max", strconv.Itoa(16<<20)); err != nil {
		return err
	}
	l, err := listen(genl.GroupOOM)
	if err != nil {
		return err
	}
	defer l.close()
	ctl, err := genl.Dial()
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.Watch(cg.id); err != nil {
		return err
	}
	defer func() { _ = ctl.Unwatch(cg.id) }()
	lat := "/tmp/bench-oom-lat"
	hog, err := cg.start("hog-mem-timed", "48", lat)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _, _ = waitTimeout(hog, 120*time.Second); close(exited) }()
	grants := 0
loop:
	for {
		select {
		case req := <-l.oom:
			if req.CgroupID != cg.id {
				continue
			}
			if err := cg.set("memory.max", strconv.FormatUint(req.MaxBytes+1<<20, 10)); err != nil {
				return err
			}
			if err := ctl.ReplyOOM(req.ID, true); err != nil {
				return err
			}
			grants++
		case <-exited:
			break loop
		}
	}
	if !hog.ProcessState.Success() {
		return fmt.Errorf("hog: %v", hog.ProcessState)
	}
	b, err := os.ReadFile(lat)
	if err != nil {
		return err
	}
	var us []float64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(f, 64)
		if err == nil {
			us = append(us, v)
		}
	}
	if grants == 0 || len(us) < grants {
		return errors.New("no rescued charges measured")
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(us)))
	resc := us[:grants]
	sort.Float64s(resc)
	pct := func(p float64) float64 { return resc[int(p*float64(len(resc)-1))] }
	sum["oom_rescues"] = grants
	sum["oom_rescue_p50_us"] = pct(0.50)
	sum["oom_rescue_p99_us"] = pct(0.99)
	fmt.Printf("bench: %d OOM rescues, p50 %.0f us, p99 %.0f us\n", grants, pct(0.5), pct(0.99))
	return nil
}

// hogMemTimed touches args[0] MiB and writes each touch's latency (us) to args[1].
func hogMemTimed(args []string) int {
	n := atoiArg(args, 0, 48)
	b := make([]byte, n<<20)
	lat := make([]string, 0, len(b)/4096)
	for i := 0; i < len(b); i += 4096 {
		t := time.Now()
		b[i] = 1
		lat = append(lat, strconv.FormatFloat(float64(time.Since(t).Nanoseconds())/1e3, 'f', 1, 64))
	}
	if len(args) > 1 {
		if err := os.WriteFile(args[1], []byte(strings.Join(lat, "\n")), 0o644); err != nil {
			fmt.Println("hog-mem-timed:", err)
			return 1
		}
	}
	return 0
}
