// Command bench-bpf measures escrad's telemetry backends on this host's
// own kernel (make bench-kernel, after the VM part; or make bench-bpf):
// the bpf backend and, in the same run on the same groups, the cgroupfs
// backend, both at a 100 ms period with -groups cgroup v1 groups.
//
//   - records_delivered_per_s: period records that reached the sink;
//   - cpu_us_per_record: user + system CPU of this process while the
//     backend ran (the workloads are other processes), plus for bpf the
//     kernel time of the BPF programs (BPF run-time statistics), per
//     record;
//   - throttle_flag_errors: records whose throttled flag contradicts the
//     group's workload: -hogs groups run a busy loop under a 1 % quota
//     (throttled in every period unless the host starves them), the
//     others a 0.3 % duty load under a 50 % quota (never throttled).
//
// It merges bpf_* and host_cgroupfs_* keys into OUT/summary.json (the VM
// benchmark writes the kernel and VM cgroupfs keys there) and writes
// OUT/bpf-report.txt. Every group it made is removed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/bpf"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/internal/cgtest"
	"github.com/escra-dev/escra/daemon/oom"
	"github.com/escra-dev/escra/daemon/telemetry"
	"github.com/escra-dev/escra/internal/dockertest"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

var (
	out    = flag.String("out", "results/kernel", "output directory (summary.json is merged into)")
	groups = flag.Int("groups", 100, "cgroups watched")
	hogs   = flag.Int("hogs", 10, "of which run a busy loop under a 1 % quota")
	window = flag.Duration("window", 20*time.Second, "measurement window per backend")
	period = flag.Duration("period", 100*time.Millisecond, "telemetry and CFS period")
)

const (
	hogQuotaUs   = 1000
	lightQuotaUs = 50000
	lightDuty    = "0.003"
)

type group struct {
	rel string
	hog bool
	g   *cgroups.Group
}

// countSink counts what a backend delivers and checks the throttle flag
// against each group's workload.
type countSink struct {
	mu   sync.Mutex
	hog  map[uint32]bool
	last map[uint32]prevRec
	n    counts
}

// prevRec is a group's previous record, for the counter check.
type prevRec struct {
	seq, nr   uint64
	throttled bool
}

type counts struct {
	records, errors int
	hogRecs, hogErr int
	litRecs, litErr int
	events          int // throttle events (mid_period)
	// vsKernel: a period that ended throttled by the kernel's own count
	// (nr_throttled, as the next record shows it) without the flag. Only
	// meaningful where records are CFS periods (bpf, kernel backends).
	vsKernel int
}

func (s *countSink) CPU(st *pb.CpuStat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.MidPeriod {
		s.n.events++
		return
	}
	hog, ok := s.hog[st.Handle]
	if !ok {
		return
	}
	n := &s.n
	if p, ok := s.last[st.Handle]; ok && p.seq+1 == st.PeriodSeq && st.NrThrottled > p.nr && !p.throttled {
		n.vsKernel++
	}
	s.last[st.Handle] = prevRec{seq: st.PeriodSeq, nr: st.NrThrottled, throttled: st.Throttled}
	n.records++
	if hog {
		n.hogRecs++
		if !st.Throttled {
			n.hogErr++
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
func (s *countSink) Flush()        {}
func (s *countSink) OOM(oom.Event) {}

type result struct {
	Records       int
	PerS          float64
	CPUUsPerRec   float64
	UserSysUs     float64
	BPFRunUs      float64
	FlagErrors    int
	HogRecords    int
	HogErrors     int
	LightRecords  int
	LightErrors   int
	VsKernel      int
	AloneRecords  int // records in the CPU run
	EventsPerS    float64
	SwitchUs      float64 // of BPFRunUs, the sched_switch program
	RecordsDrops  uint64
	WindowSeconds float64
}

func say(f string, a ...any) { fmt.Fprintf(os.Stderr, "[bench-bpf] "+f+"\n", a...) }

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-bpf:", err)
		os.Exit(1)
	}
}

func rusageUs() float64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

func run() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (cgroups, BPF)")
	}
	if cgroups.HostVersion() != cgroups.V1 {
		return errors.New("makes cgroup v1 groups; this host runs cgroup v2")
	}
	if *groups < 2 || *hogs < 1 || *hogs >= *groups {
		return errors.New("-groups must be >= 2 and 1 <= -hogs < -groups")
	}
	bin, err := os.MkdirTemp("", "bpf-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	if err := dockertest.BuildBinaries(bin, "./workloads/spin"); err != nil {
		return err
	}
	spin := filepath.Join(bin, "spin")
	root := fmt.Sprintf("/bpf-bench-%d", os.Getpid())
	var gs []*group
	cleanup := func() {
		for _, g := range gs {
			if g.g != nil {
				g.g.Close()
			}
			cgtest.Remove(g.rel)
		}
		cgtest.Remove(root)
	}
	defer cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; cleanup(); os.Exit(1) }()

	if err := cgtest.Make(root); err != nil { // cpuset: children copy its cpus/mems
		return err
	}
	say("%d groups (%d busy loops under a %d us quota, %d at %s duty under %d us), %v period, %v per backend",
		*groups, *hogs, hogQuotaUs, *groups-*hogs, lightDuty, lightQuotaUs, *period, *window)
	for i := 0; i < *groups; i++ {
		g := &group{rel: fmt.Sprintf("%s/g%03d", root, i), hog: i < *hogs}
		gs = append(gs, g)
		if err := cgtest.Make(g.rel); err != nil {
			return err
		}
		q := lightQuotaUs
		args := []string{"-duty", lightDuty}
		if g.hog {
			q, args = hogQuotaUs, nil
		}
		cpu := filepath.Join("/sys/fs/cgroup/cpu", g.rel)
		if err := os.WriteFile(filepath.Join(cpu, "cpu.cfs_period_us"), []byte(fmt.Sprint(period.Microseconds())), 0); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cpu, "cpu.cfs_quota_us"), []byte(fmt.Sprint(q)), 0); err != nil {
			return err
		}
		if _, err := cgtest.Start(g.rel, spin, args...); err != nil {
			return err
		}
		paths := cgroups.Paths{Version: cgroups.V1, CPU: cpu, CPUAcct: filepath.Join("/sys/fs/cgroup/cpuacct", g.rel),
			Memory: filepath.Join("/sys/fs/cgroup/memory", g.rel), CPUSet: filepath.Join("/sys/fs/cgroup/cpuset", g.rel)}
		if g.g, err = cgroups.Open(paths); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // workloads settle

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	limits := func(h uint32) (int64, uint32) {
		if gs[h-1].hog {
			return hogQuotaUs, uint32(period.Microseconds())
		}
		return lightQuotaUs, uint32(period.Microseconds())
	}
	newCgroupfs := func(watcher bool) (telemetry.Source, error) {
		cg, err := telemetry.NewCgroupfs(*period, log)
		if err != nil {
			return nil, err
		}
		// Period records only: escrad's throttle watcher (--throttle-poll)
		// is a cgroupfs extra the other backends do not have; it is
		// measured apart.
		if !watcher {
			cg.ThrottlePoll, cg.ThrottleNear = 0, 0
		}
		cg.Limits = limits
		return cg, nil
	}

	// Records and flags: both backends at once on the same groups, so
	// both see the same load (this host is shared and its load drifts).
	say("both backends at once (records, flags) ...")
	cg, err := newCgroupfs(false)
	if err != nil {
		return err
	}
	bs, err := bpf.New(log)
	if err != nil {
		return err
	}
	both, err := measure([]telemetry.Source{cg, bs}, gs, nil)
	if err != nil {
		return err
	}
	rc, rb := both[0], both[1]
	// CPU: each alone, the same window.
	say("cgroupfs alone (CPU) ...")
	if cg, err = newCgroupfs(false); err != nil {
		return err
	}
	alone, err := measure([]telemetry.Source{cg}, gs, nil)
	if err != nil {
		return fmt.Errorf("cgroupfs: %w", err)
	}
	rc.setCPU(alone[0])
	say("cgroupfs with escrad's default throttle watcher (CPU) ...")
	if cg, err = newCgroupfs(true); err != nil {
		return err
	}
	withWatcher, err := measure([]telemetry.Source{cg}, gs, nil)
	if err != nil {
		return fmt.Errorf("cgroupfs: %w", err)
	}
	rw := withWatcher[0]
	say("bpf alone (CPU) ...")
	if bs, err = bpf.New(log); err != nil {
		return err
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	alone, err = measure([]telemetry.Source{bs}, gs, bs)
	stats.Close()
	if err != nil {
		return fmt.Errorf("bpf: %w", err)
	}
	rb.setCPU(alone[0])
	report("cgroupfs", rc)
	report("cgroupfs+watcher", rw)
	report("bpf", rb)
	return write(rb, rc, rw)
}

// measure watches every group with each source (at the same time), lets
// them run for one window and counts what reaches each one's sink. CPU
// figures are the whole process's: meaningful with one source.
func measure(srcs []telemetry.Source, gs []*group, b *bpf.Source) ([]result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sinks := make([]*countSink, len(srcs))
	done := make(chan error, len(srcs))
	for j, src := range srcs {
		sink := &countSink{hog: map[uint32]bool{}, last: map[uint32]prevRec{}}
		sinks[j] = sink
		for i, g := range gs {
			h := uint32(i + 1)
			// OOM traps are not measured; a failure to arm one is not fatal.
			_ = src.Watch(h, g.g)
			sink.hog[h] = g.hog
		}
		go func() { done <- src.Run(ctx, sink) }()
	}
	time.Sleep(time.Second) // baselines (cgroupfs) and first records
	for _, sink := range sinks {
		sink.mu.Lock()
		sink.n, sink.last = counts{}, map[uint32]prevRec{}
		sink.mu.Unlock()
	}
	var st0 bpf.Stats
	if b != nil {
		st0, _ = b.Stats()
	}
	cpu0, t0 := rusageUs(), time.Now()
	time.Sleep(*window)
	cpu1, el := rusageUs(), time.Since(t0)
	var st1 bpf.Stats
	if b != nil {
		st1, _ = b.Stats()
	}
	var out []result
	for j, src := range srcs {
		sink := sinks[j]
		sink.mu.Lock()
		c := sink.n
		sink.mu.Unlock()
		for i := range gs {
			src.Unwatch(uint32(i + 1))
		}
		r := result{Records: c.records, PerS: float64(c.records) / el.Seconds(), UserSysUs: cpu1 - cpu0,
			BPFRunUs: float64(st1.RunNs-st0.RunNs) / 1e3, FlagErrors: c.errors, HogRecords: c.hogRecs, HogErrors: c.hogErr,
			LightRecords: c.litRecs, LightErrors: c.litErr, VsKernel: c.vsKernel, RecordsDrops: st1.Dropped - st0.Dropped,
			EventsPerS: float64(c.events) / el.Seconds(), SwitchUs: float64(st1.SwitchNs-st0.SwitchNs) / 1e3,
			WindowSeconds: el.Seconds()}
		if c.records > 0 {
			r.CPUUsPerRec = (r.UserSysUs + r.BPFRunUs) / float64(c.records)
		}
		out = append(out, r)
	}
	cancel()
	for range srcs {
		if err := <-done; err != nil {
			return nil, err
		}
	}
	return out, nil
}

// setCPU takes the CPU figures from a run of the backend alone.
func (r *result) setCPU(alone result) {
	r.UserSysUs, r.BPFRunUs, r.CPUUsPerRec, r.RecordsDrops = alone.UserSysUs, alone.BPFRunUs, alone.CPUUsPerRec, r.RecordsDrops+alone.RecordsDrops
	r.SwitchUs = alone.SwitchUs
	r.AloneRecords = alone.Records
}

func report(name string, r result) {
	say("%s: %.1f records/s, %.1f throttle events/s, %.2f us CPU per record (user+sys %.0f us, BPF programs %.0f us, sched_switch %.0f us), throttle flag errors %d (busy %d/%d, light %d/%d), ring buffer drops %d",
		name, r.PerS, r.EventsPerS, r.CPUUsPerRec, r.UserSysUs, r.BPFRunUs, r.SwitchUs, r.FlagErrors, r.HogErrors, r.HogRecords, r.LightErrors, r.LightRecords, r.RecordsDrops)
}

func write(b, c, w result) error {
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(*out, "summary.json")
	sum := map[string]any{}
	if old, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(old, &sum); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	var un unix.Utsname
	_ = unix.Uname(&un)
	round := func(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
	for k, v := range map[string]any{
		"bpf_records_delivered_per_s":                 round(b.PerS),
		"bpf_cpu_us_per_record":                       round(b.CPUUsPerRec),
		"bpf_throttle_flag_errors":                    b.FlagErrors,
		"bpf_records":                                 b.Records,
		"bpf_program_us":                              round(b.BPFRunUs),
		"bpf_ringbuf_drops":                           b.RecordsDrops,
		"bpf_throttle_flag_missed_vs_kernel":          b.VsKernel,
		"bpf_throttle_events_per_s":                   round(b.EventsPerS),
		"bpf_program_sched_switch_us":                 round(b.SwitchUs),
		"host_cgroupfs_records_delivered_per_s":       round(c.PerS),
		"host_cgroupfs_cpu_us_per_record":             round(c.CPUUsPerRec),
		"host_cgroupfs_throttle_flag_errors":          c.FlagErrors,
		"host_cgroupfs_records":                       c.Records,
		"host_cgroupfs_watcher_cpu_us_per_record":     round(w.CPUUsPerRec),
		"host_cgroupfs_watcher_throttle_events_per_s": round(w.EventsPerS),
		"bpf_bench_groups":                            *groups,
		"bpf_bench_busy_groups":                       *hogs,
		"bpf_bench_period_ms":                         period.Milliseconds(),
		"bpf_bench_window_s":                          round(b.WindowSeconds),
		"bpf_bench_kernel":                            unix.ByteSliceToString(un.Release[:]),
	} {
		sum[k] = v
	}
	j, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(path, append(j, '\n'), 0o644); err != nil {
		return err
	}
	rep := fmt.Sprintf(`escrad telemetry backends on this host's kernel (%s), %s
%d cgroup v1 groups at a %v period, same groups and workloads; records and
flag errors with both backends running at once for %.0f s (same load), CPU with
each alone for as long:
%d busy loops under a %d us quota (throttled every period), %d at %s duty under %d us (never)

backend   records/s  CPU us/record (alone)  user+sys us  BPF us  flag errors (busy, light)
bpf       %9.1f  %21.2f  %11.0f  %6.0f  %d (%d/%d, %d/%d)
cgroupfs  %9.1f  %21.2f  %11.0f  %6s  %d (%d/%d, %d/%d)

bpf: %d periods that ended throttled by the kernel's own count
(nr_throttled in the next record) were not flagged; %.1f throttle events/s
(sched_switch program %.0f us of the BPF time).
cgroupfs ran its period sampler only (--throttle-poll 0); with escrad's
default throttle watcher (10 ms poll, throttle events) it cost %.2f us per
period record alone, with %.1f throttle events/s. BPF us: the programs' kernel run time
(BPF_STATS_RUN_TIME), which includes the filter on every hrtimer expiry of
the host. Command: make bench-bpf (or the host part of make bench-kernel).
`, unix.ByteSliceToString(un.Release[:]), time.Now().UTC().Format(time.RFC3339), *groups, *period, b.WindowSeconds,
		*hogs, hogQuotaUs, *groups-*hogs, lightDuty, lightQuotaUs,
		b.PerS, b.CPUUsPerRec, b.UserSysUs, b.BPFRunUs, b.FlagErrors, b.HogErrors, b.HogRecords, b.LightErrors, b.LightRecords,
		c.PerS, c.CPUUsPerRec, c.UserSysUs, "-", c.FlagErrors, c.HogErrors, c.HogRecords, c.LightErrors, c.LightRecords,
		b.VsKernel, b.EventsPerS, b.SwitchUs, w.CPUUsPerRec, w.EventsPerS)
	if err := os.WriteFile(filepath.Join(*out, "bpf-report.txt"), []byte(rep), 0o644); err != nil {
		return err
	}
	fmt.Print(rep)
	say("merged bpf_* and host_cgroupfs_* into %s", path)
	return nil
}
