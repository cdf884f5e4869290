// Package telebench measures escrad's telemetry backends like for like:
// the same groups, the same workloads, the same sink
// and the same CPU accounting for every backend. make bench-kernel uses it
// twice: inside the QEMU guest on the patched kernel (vm-tests/guest: the
// kernel backend and cgroupfs) and on this host's own kernel
// (bench/cmd/bench-bpf: the bpf backend and cgroupfs). cgroupfs runs in
// both places, so each backend's figures can be read against it.
//
// What it measures, per backend, over one window:
//
//   - records delivered: period records (CpuStat without mid_period) that
//     reached the sink for a watched group, per second;
//   - CPU per record: the user + system CPU time of this process (getrusage;
//     the workloads are other processes) plus the kernel time the backend
//     spends outside it (Backend.Probe: the BPF programs' run time, escra.ko's
//     hook and drain work), divided by the records delivered;
//   - throttle flag errors: records whose throttled flag contradicts the
//     group's workload: busy groups run a busy loop under a 1 % quota
//     (throttled in every period unless the machine starves them), light
//     groups a 0.3 % duty load under a 50 % quota (never throttled).
//
// Records and flags come from all backends running at once on the same
// groups (same load: the host is shared and its load drifts); CPU from a
// second window with each backend alone, since rusage is the process's.
package telebench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The workload plan, the same on the host and in the guest.
const (
	BusyQuotaUs  = 1000  // busy groups: a busy loop under 1 % of a 100 ms period
	LightQuotaUs = 50000 // light groups: LightDuty of every period under 50 %
	LightDuty    = 0.003
)

// Group is one watched cgroup and what its records' throttled flag must say.
type Group struct {
	G    *cgroups.Group
	Busy bool
}

// Handle is the handle group i is watched under (1-based, as escrad's).
func Handle(i int) uint32 { return uint32(i + 1) }

// Counters are a backend's own cumulative counters, read before and after
// the window (Backend.Probe).
type Counters struct {
	// KernelNs is CPU time the backend spends where this process's rusage
	// does not see it (BPF programs, escra.ko's hook and drain work).
	KernelNs uint64
	// Dropped counts records lost before the sink (ring full, socket full).
	Dropped uint64
	// PartsNs names parts of KernelNs (reported as <backend>_<part>_us);
	// Counts other counters (reported as <backend>_<name>), both as deltas.
	PartsNs map[string]uint64
	Counts  map[string]uint64
}

// Backend is one telemetry source under test.
type Backend struct {
	Src   source.Source
	Probe func() Counters // nil: nothing outside the process
	Close func()          // nil, or called after the window
}

// Spec makes a fresh backend for each window; alone is true for the CPU
// window (a backend may enable run-time statistics only then).
type Spec struct {
	Name string
	New  func(alone bool) (Backend, error)
	// CFSPeriods: the backend's records are the scheduler's CFS periods
	// (kernel, bpf), so the flag can be checked against nr_throttled.
	CFSPeriods bool
}

// Result is one backend's figures.
type Result struct {
	Name          string
	Records       int     // delivered in the shared window
	PerS          float64 // Records per second
	CPUUsPerRec   float64 // (UserSysUs + KernelUs) / AloneRecords
	UserSysUs     float64 // this process, alone window
	KernelUs      float64 // Probe's KernelNs, alone window
	AloneRecords  int
	FlagErrors    int
	BusyRecords   int
	BusyErrors    int // busy group's record not flagged
	LightRecords  int
	LightErrors   int  // light group's record flagged
	VsKernel      int  // flag missing where the kernel's nr_throttled rose
	CFSPeriods    bool // VsKernel means something (Spec.CFSPeriods)
	EventsPerS    float64
	Dropped       uint64 // both windows
	PartsUs       map[string]float64
	Counts        map[string]uint64
	WindowSeconds float64
}

// Config is one comparison.
type Config struct {
	Groups []Group
	Window time.Duration
	// Together are measured at once (records, flags), then each alone (CPU);
	// AloneOnly only alone (a variant whose records the others already show).
	Together  []Spec
	AloneOnly []Spec
	Say       func(format string, a ...any) // progress; nil: quiet
}

// Compare runs the windows and returns a result per spec, by name.
func Compare(cfg Config) (map[string]Result, error) {
	say := cfg.Say
	if say == nil {
		say = func(string, ...any) {}
	}
	out := map[string]Result{}
	var names []string
	var bs []Backend
	for _, sp := range cfg.Together {
		b, err := sp.New(false)
		if err != nil {
			closeAll(bs)
			return nil, fmt.Errorf("%s: %w", sp.Name, err)
		}
		bs = append(bs, b)
		names = append(names, sp.Name)
	}
	say("%v at once on %d groups (records, flags), %v ...", names, len(cfg.Groups), cfg.Window)
	rs, err := measure(bs, cfg.Groups, cfg.Window)
	closeAll(bs)
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		rs[i].Name = n
		rs[i].CFSPeriods = cfg.Together[i].CFSPeriods
		out[n] = rs[i]
	}
	for _, sp := range append(append([]Spec(nil), cfg.Together...), cfg.AloneOnly...) {
		say("%s alone (CPU), %v ...", sp.Name, cfg.Window)
		b, err := sp.New(true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.Name, err)
		}
		a, err := measure([]Backend{b}, cfg.Groups, cfg.Window)
		closeAll([]Backend{b})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sp.Name, err)
		}
		r, ok := out[sp.Name]
		if !ok { // alone only: its records and flags are the alone window's
			r = a[0]
			r.Name, r.CFSPeriods = sp.Name, sp.CFSPeriods
			r.Dropped = 0
		}
		r.setCPU(a[0])
		out[sp.Name] = r
	}
	return out, nil
}

func closeAll(bs []Backend) {
	for _, b := range bs {
		if b.Close != nil {
			b.Close()
		}
	}
}

// sink counts what a backend delivers and checks the throttle flag
// against each group's workload.
type sink struct {
	mu   sync.Mutex
	busy map[uint32]bool
	last map[uint32]prev
	n    counts
}

type prev struct {
	seq, nr   uint64
	throttled bool
}

type counts struct {
	records, errors  int
	busyRecs, busyEr int
	litRecs, litErr  int
	events           int
	vsKernel         int
}

func (s *sink) CPU(st *pb.CpuStat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.MidPeriod {
		s.n.events++
		return
	}
	busy, ok := s.busy[st.Handle]
	if !ok {
		return
	}
	n := &s.n
	// A period the kernel counted throttled (nr_throttled rose by the
	// next record) without the flag. Only where records are CFS periods.
	if p, ok := s.last[st.Handle]; ok && p.seq+1 == st.PeriodSeq && st.NrThrottled > p.nr && !p.throttled {
		n.vsKernel++
	}
	s.last[st.Handle] = prev{seq: st.PeriodSeq, nr: st.NrThrottled, throttled: st.Throttled}
	n.records++
	if busy {
		n.busyRecs++
		if !st.Throttled {
			n.busyEr++
			n.errors++
		}
	} else {
		n.litRecs++
		if st.Throttled {
			n.litErr++
			n.errors++
		}
	}
}
func (s *sink) Flush()           {}
func (s *sink) OOM(rescue.Event) {}

// RusageUs is this process's user + system CPU time in microseconds.
func RusageUs() float64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// measure watches every group with each backend (at the same time), lets
// them run for one window and counts what reaches each one's sink. CPU
// figures are the whole process's: meaningful with one backend.
func measure(bs []Backend, gs []Group, window time.Duration) ([]Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sinks := make([]*sink, len(bs))
	done := make(chan error, len(bs))
	for j, b := range bs {
		s := &sink{busy: map[uint32]bool{}, last: map[uint32]prev{}}
		sinks[j] = s
		failed := 0
		var werr error
		for i, g := range gs {
			// OOM traps are not measured: a backend may fail to arm one
			// and still report the group.
			if err := b.Src.Watch(Handle(i), g.G); err != nil {
				failed++
				werr = err
			}
			s.busy[Handle(i)] = g.Busy
		}
		if failed == len(gs) {
			return nil, fmt.Errorf("%s backend: no group watched: %w", b.Src.Backend(), werr)
		}
		go func() { done <- b.Src.Run(ctx, s) }()
	}
	time.Sleep(time.Second) // baselines (cgroupfs) and first records
	for _, s := range sinks {
		s.mu.Lock()
		s.n, s.last = counts{}, map[uint32]prev{}
		s.mu.Unlock()
	}
	c0 := make([]Counters, len(bs))
	for j, b := range bs {
		if b.Probe != nil {
			c0[j] = b.Probe()
		}
	}
	cpu0, t0 := RusageUs(), time.Now()
	time.Sleep(window)
	cpu1, el := RusageUs(), time.Since(t0)
	var out []Result
	for j, b := range bs {
		var c1 Counters
		if b.Probe != nil {
			c1 = b.Probe()
		}
		s := sinks[j]
		s.mu.Lock()
		c := s.n
		s.mu.Unlock()
		r := Result{Records: c.records, PerS: float64(c.records) / el.Seconds(), UserSysUs: cpu1 - cpu0,
			KernelUs: float64(c1.KernelNs-c0[j].KernelNs) / 1e3, AloneRecords: c.records,
			FlagErrors: c.errors, BusyRecords: c.busyRecs, BusyErrors: c.busyEr,
			LightRecords: c.litRecs, LightErrors: c.litErr, VsKernel: c.vsKernel,
			EventsPerS: float64(c.events) / el.Seconds(), Dropped: c1.Dropped - c0[j].Dropped,
			PartsUs: map[string]float64{}, Counts: map[string]uint64{}, WindowSeconds: el.Seconds()}
		for k, v := range c1.PartsNs {
			r.PartsUs[k] = float64(v-c0[j].PartsNs[k]) / 1e3
		}
		for k, v := range c1.Counts {
			r.Counts[k] = v - c0[j].Counts[k]
		}
		if c.records > 0 {
			r.CPUUsPerRec = (r.UserSysUs + r.KernelUs) / float64(c.records)
		}
		out = append(out, r)
	}
	for _, b := range bs {
		for i := range gs {
			b.Src.Unwatch(Handle(i))
		}
	}
	cancel()
	for range bs {
		if err := <-done; err != nil {
			return nil, err
		}
	}
	return out, nil
}

// setCPU takes the CPU figures (and the backend's own counters) from a
// window with the backend alone.
func (r *Result) setCPU(alone Result) {
	r.UserSysUs, r.KernelUs, r.CPUUsPerRec = alone.UserSysUs, alone.KernelUs, alone.CPUUsPerRec
	r.AloneRecords = alone.Records
	r.Dropped += alone.Dropped
	r.PartsUs, r.Counts = alone.PartsUs, alone.Counts
}

// Keys are a result's summary.json entries under prefix (kernel, bpf,
// cgroupfs, host_cgroupfs, ...).
func Keys(prefix string, r Result) map[string]any {
	m := map[string]any{
		prefix + "_records_delivered_per_s":    Round(r.PerS),
		prefix + "_cpu_us_per_record":          Round(r.CPUUsPerRec),
		prefix + "_throttle_flag_errors":       r.FlagErrors,
		prefix + "_throttle_flag_errors_busy":  r.BusyErrors,
		prefix + "_throttle_flag_errors_light": r.LightErrors,
		prefix + "_records":                    r.Records,
		prefix + "_records_busy":               r.BusyRecords,
		prefix + "_records_light":              r.LightRecords,
		prefix + "_records_dropped":            r.Dropped,
		prefix + "_throttle_events_per_s":      Round(r.EventsPerS),
		prefix + "_user_sys_us":                Round(r.UserSysUs),
		prefix + "_kernel_us":                  Round(r.KernelUs),
		prefix + "_records_alone":              r.AloneRecords,
	}
	if r.CFSPeriods {
		m[prefix+"_throttle_flag_missed_vs_kernel"] = r.VsKernel
	}
	for k, v := range r.PartsUs {
		m[prefix+"_"+k+"_us"] = Round(v)
	}
	for k, v := range r.Counts {
		m[prefix+"_"+k] = v
	}
	return m
}

// Ratios adds, where both sides are in sum, each backend's figures over
// the cgroupfs run measured beside it on the same machine: kernel over
// cgroupfs (the guest), bpf over host_cgroupfs (the host). cgroupfs is the
// bridge: the machines differ (an emulated guest is many times slower), the
// ratios are comparable.
func Ratios(sum map[string]any) {
	f := func(k string) (float64, bool) {
		switch v := sum[k].(type) {
		case float64:
			return v, v > 0
		case int:
			return float64(v), v > 0
		}
		return 0, false
	}
	for _, p := range [][2]string{{"kernel", "cgroupfs"}, {"bpf", "host_cgroupfs"}} {
		for _, k := range []string{"records_delivered_per_s", "cpu_us_per_record"} {
			a, ok1 := f(p[0] + "_" + k)
			b, ok2 := f(p[1] + "_" + k)
			if ok1 && ok2 {
				sum["ratio_"+k+"_"+p[0]+"_over_"+p[1]] = Round(a / b)
			}
		}
	}
}

// Round keeps two decimals.
func Round(x float64) float64 { return math.Round(x*100) / 100 }

// Duty burns CPU for duty of every slot until the process is killed: the
// light groups' load (workloads/spin -duty on the host does the same).
func Duty(duty float64, slot time.Duration) {
	var x atomic.Uint64
	busy := time.Duration(duty * float64(slot))
	next := time.Now()
	for {
		for start := time.Now(); time.Since(start) < busy; {
			x.Add(1)
		}
		next = next.Add(slot)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
}
