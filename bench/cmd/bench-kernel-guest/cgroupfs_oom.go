package main

// The cgroupfs-backend OOM half of make bench-kernel: escrad's stock-kernel
// backend on this guest's cgroup v2, measured in the same VM run, so the
// kernel/cgroupfs ratios mean something under TCG. (Its telemetry is
// measured beside the kernel backend's in telemetry.go.)

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/vm-tests/harness"
)

// benchCgroupfsOOM: escrad's agent on the cgroupfs backend (cgroup v2
// brake: memory.high 8 MiB below memory.max) and the controller on
// loopback granting 8 MiB steps (one brake margin, so each grant lifts the
// brake above the usage that tripped it). The hog logs every page touch
// (end, duration); a rescue is timed from the start of the touch during
// which escrad read the memory.events "high" change (the kernel's event
// came no earlier) to the hog's first touch completing after memory.max
// and memory.high were raised.
func benchCgroupfsOOM(sum map[string]any) error {
	cg, err := harness.NewCgroup("bench-cf-oom")
	if err != nil {
		return err
	}
	defer cg.Remove()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := harness.StartController(ctx, harness.BrakeMargin, server.AppSpec{Name: "benchcf", CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.75})
	if err != nil {
		return err
	}
	type rescue struct{ event, raised time.Time }
	var mu sync.Mutex
	var rescues []rescue
	a, err := agent.New(agent.Config{HostID: "vm-cf", Controller: srv.TCPAddr(), Period: 100 * time.Millisecond,
		Backend: agent.BackendCgroupfs, Log: quiet, OOMDeadline: time.Second, // TCG: as for the kernel figures
		Cgroups: []containers.CgroupSpec{{Name: "bench-cf-oom", App: "benchcf", Path: "/bench-cf-oom"}},
		OnOOMRescue: func(_, returned time.Duration) {
			now := time.Now() // the limit and the brake are raised by now
			mu.Lock()
			rescues = append(rescues, rescue{event: now.Add(-returned), raised: now})
			mu.Unlock()
		}})
	if err != nil {
		return err
	}
	if a.Backend() != agent.BackendCgroupfs {
		return fmt.Errorf("agent picked backend %s", a.Backend())
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	m, err := harness.Registered(srv, "bench-cf-oom", cg)
	if err != nil {
		return err
	}
	if err := harness.WaitBrake(cg, harness.BrakeFor(m.MemoryLimitBytes), 5*time.Second); err != nil {
		return err
	}
	trace := "/tmp/bench-cf-trace"
	want := m.MemoryLimitBytes>>20 + 192
	hog, err := cg.Start("hog-mem-trace", strconv.FormatInt(want, 10), trace)
	if err != nil {
		return err
	}
	ps, err := harness.WaitTimeout(hog, 180*time.Second)
	if err != nil {
		return err
	}
	kills, _ := cg.Keyed("memory.events", "oom_kill")
	highs, _ := cg.Keyed("memory.events", "high")
	m, _ = harness.Member(srv, "bench-cf-oom")
	if !ps.Success() || kills != 0 {
		return fmt.Errorf("hog of %d MiB: %v, oom_kill %d (controller: %d requests, %d grants, %d denials)",
			want, ps, kills, m.OOMRequests, m.OOMGrants, m.OOMDenials)
	}
	ends, durs, err := readTrace(trace)
	if err != nil {
		return err
	}
	mu.Lock()
	rs := append([]rescue(nil), rescues...)
	mu.Unlock()
	var rescueUs, raiseUs []float64
	for _, r := range rs {
		// The kernel fired the event during the touch escrad's read fell
		// into (or just before it): that touch's start is the earliest the
		// event can have been, so the figure never flatters cgroupfs.
		j := sort.Search(len(ends), func(i int) bool { return ends[i] >= r.event.UnixNano() })
		i := sort.Search(len(ends), func(i int) bool { return ends[i] >= r.raised.UnixNano() })
		if i == len(ends) {
			continue // the hog had finished: nothing left to resume
		}
		start := ends[j] - int64(durs[j]*1e3)
		rescueUs = append(rescueUs, float64(ends[i]-start)/1e3)
		raiseUs = append(raiseUs, float64(r.raised.Sub(r.event).Nanoseconds())/1e3)
	}
	if len(rescueUs) == 0 {
		return fmt.Errorf("no rescue measured (%d grants, %d memory.events high)", m.OOMGrants, highs)
	}
	sort.Float64s(rescueUs)
	sort.Float64s(raiseUs)
	// The stall figure uses the kernel benchmark's method (the n slowest
	// touches, n = grants) for a like-for-like ratio.
	sort.Sort(sort.Reverse(sort.Float64Slice(durs)))
	stall := append([]float64(nil), durs[:min(int(m.OOMGrants), len(durs))]...)
	sort.Float64s(stall)
	sum["cgroupfs_oom_rescues"] = len(rescueUs)
	sum["cgroupfs_oom_grants"] = m.OOMGrants
	sum["cgroupfs_oom_high_events"] = highs
	sum["cgroupfs_oom_step_bytes"] = harness.BrakeMargin
	sum["cgroupfs_oom_rescue_p50_us"] = pctl(rescueUs, 0.50)
	sum["cgroupfs_oom_rescue_p99_us"] = pctl(rescueUs, 0.99)
	sum["cgroupfs_oom_raise_p50_us"] = pctl(raiseUs, 0.50)
	sum["cgroupfs_oom_raise_p99_us"] = pctl(raiseUs, 0.99)
	if len(stall) > 0 {
		sum["cgroupfs_oom_stall_p50_us"] = pctl(stall, 0.50)
		sum["cgroupfs_oom_stall_p99_us"] = pctl(stall, 0.99)
	}
	fmt.Printf("bench: %d cgroupfs (v2 memory.high) rescues through escrad and the controller: high event -> hog running p50 %.0f us, p99 %.0f us; escrad's read -> limit raised p50 %.0f us, p99 %.0f us; %d high events, hog %d MiB exit 0, oom_kill 0\n",
		len(rescueUs), pctl(rescueUs, 0.5), pctl(rescueUs, 0.99), pctl(raiseUs, 0.5), pctl(raiseUs, 0.99), highs, want)
	return nil
}

func pctl(sorted []float64, p float64) float64 { return sorted[int(p*float64(len(sorted)-1))] }

// readTrace reads hog-mem-trace's file: "end_unix_ns duration_us" lines.
func readTrace(path string) (ends []int64, durs []float64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		e, err1 := strconv.ParseInt(f[0], 10, 64)
		d, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil {
			ends = append(ends, e)
			durs = append(durs, d)
		}
	}
	if len(ends) == 0 {
		return nil, nil, errors.New("empty hog trace")
	}
	return ends, durs, nil
}

// hogMemTrace touches args[0] MiB and writes, per touch, its end (Unix
// ns, the guest's clock shared with escrad) and its duration (us) to args[1].
func hogMemTrace(args []string) int {
	n := harness.AtoiArg(args, 0, 48)
	b := make([]byte, n<<20)
	ends := make([]int64, 0, len(b)/4096)
	durs := make([]int64, 0, len(b)/4096)
	for i := 0; i < len(b); i += 4096 {
		t := time.Now()
		b[i] = 1
		e := time.Now()
		ends = append(ends, e.UnixNano())
		durs = append(durs, e.Sub(t).Nanoseconds())
	}
	var sb strings.Builder
	for i := range ends {
		fmt.Fprintf(&sb, "%d %.1f\n", ends[i], float64(durs[i])/1e3)
	}
	if err := os.WriteFile(args[1], []byte(sb.String()), 0o644); err != nil {
		fmt.Println("hog-mem-trace:", err)
		return 1
	}
	return 0
}
