// Command bench-bpf measures escrad's telemetry backends on this host's
// own kernel (make bench-kernel, after the VM part; or make bench-bpf):
// the bpf backend and, in the same run on the same groups, the cgroupfs
// backend, both at a 100 ms period with -groups cgroup v1 groups. The
// measuring is bench/telebench's, the same code the VM part runs for
// the kernel backend: records delivered to the same sink per second, CPU
// per record (this process's user + system time, plus for bpf the BPF
// programs' run time from BPF_STATS_RUN_TIME), throttle flag errors
// against each group's workload (-hogs busy loops under a 1 % quota, the
// others a 0.3 % duty load under 50 %).
//
// It merges bpf_* and host_cgroupfs_* keys into OUT/summary.json (the VM
// benchmark writes the kernel and VM cgroupfs keys there) and writes
// OUT/bpf-report.txt. Every group it made is removed.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/escra-dev/escra/bench/telebench"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/source/bpf"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	"github.com/escra-dev/escra/internal/dockertest"
	"golang.org/x/sys/unix"
)

var (
	out    = flag.String("out", "results/kernel", "output directory (summary.json is merged into)")
	groups = flag.Int("groups", 100, "cgroups watched")
	hogs   = flag.Int("hogs", 10, "of which run a busy loop under a 1 % quota")
	window = flag.Duration("window", 20*time.Second, "measurement window per backend")
	period = flag.Duration("period", 100*time.Millisecond, "telemetry and CFS period")
)

type group struct {
	rel string
	hog bool
	g   *cgroups.Group
}

func say(f string, a ...any) { fmt.Fprintf(os.Stderr, "[bench-bpf] "+f+"\n", a...) }

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-bpf:", err)
		os.Exit(1)
	}
}

func run() error {
	if !bpf.Built() { // make bench-bpf builds it (scripts/bpf.sh)
		return bpf.ErrNotBuilt
	}
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
	say("%d groups (%d busy loops under a %d us quota, %d at %v duty under %d us), %v period, %v per window",
		*groups, *hogs, telebench.BusyQuotaUs, *groups-*hogs, telebench.LightDuty, telebench.LightQuotaUs, *period, *window)
	for i := 0; i < *groups; i++ {
		g := &group{rel: fmt.Sprintf("%s/g%03d", root, i), hog: i < *hogs}
		gs = append(gs, g)
		if err := cgtest.Make(g.rel); err != nil {
			return err
		}
		q := telebench.LightQuotaUs
		args := []string{"-duty", fmt.Sprint(telebench.LightDuty)}
		if g.hog {
			q, args = telebench.BusyQuotaUs, nil
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
			return telebench.BusyQuotaUs, uint32(period.Microseconds())
		}
		return telebench.LightQuotaUs, uint32(period.Microseconds())
	}
	cgroupfs := func(watcher bool) telebench.Spec {
		name := "host_cgroupfs"
		if watcher {
			name = "host_cgroupfs_watcher"
		}
		return telebench.Spec{Name: name, New: func(bool) (telebench.Backend, error) {
			cg, err := cgroupfs.NewSource(*period, log)
			if err != nil {
				return telebench.Backend{}, err
			}
			// Period records only: escrad's throttle watcher (--throttle-poll)
			// is a cgroupfs extra the other backends do not have; it is
			// measured apart.
			if !watcher {
				cg.ThrottlePoll, cg.ThrottleNear = 0, 0
			}
			cg.Limits = limits
			return telebench.Backend{Src: cg}, nil
		}}
	}
	bpfSpec := telebench.Spec{Name: "bpf", New: func(alone bool) (telebench.Backend, error) {
		bs, err := bpf.New(log)
		if err != nil {
			return telebench.Backend{}, err
		}
		b := telebench.Backend{Src: bs, Probe: func() telebench.Counters {
			st, _ := bs.Stats()
			return telebench.Counters{KernelNs: st.RunNs, Dropped: st.Dropped,
				PartsNs: map[string]uint64{"program": st.RunNs, "program_sched_switch": st.SwitchNs}}
		}}
		if alone { // the programs' run time: only while measuring CPU
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				return telebench.Backend{}, fmt.Errorf("enable BPF run-time statistics: %w", err)
			}
			b.Close = func() { _ = stats.Close() }
		}
		return b, nil
	}, CFSPeriods: true}
	var tg []telebench.Group
	for _, g := range gs {
		tg = append(tg, telebench.Group{G: g.g, Busy: g.hog})
	}
	rs, err := telebench.Compare(telebench.Config{Groups: tg, Window: *window,
		Together: []telebench.Spec{cgroupfs(false), bpfSpec}, AloneOnly: []telebench.Spec{cgroupfs(true)},
		Say: say})
	if err != nil {
		return err
	}
	rb, rc, rw := rs["bpf"], rs["host_cgroupfs"], rs["host_cgroupfs_watcher"]
	report(rc)
	report(rw)
	report(rb)
	return write(rb, rc, rw)
}

func report(r telebench.Result) {
	say("%s: %.1f records/s, %.1f throttle events/s, %.2f us CPU per record (user+sys %.0f us, kernel %.0f us %v), throttle flag errors %d (busy %d/%d, light %d/%d), dropped %d",
		r.Name, r.PerS, r.EventsPerS, r.CPUUsPerRec, r.UserSysUs, r.KernelUs, r.PartsUs, r.FlagErrors, r.BusyErrors, r.BusyRecords, r.LightErrors, r.LightRecords, r.Dropped)
}

func write(b, c, w telebench.Result) error {
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
	host, _ := os.Hostname()
	kernel := unix.ByteSliceToString(un.Release[:])
	for _, m := range []map[string]any{telebench.Keys("bpf", b), telebench.Keys("host_cgroupfs", c), {
		"host_cgroupfs_watcher_cpu_us_per_record":     telebench.Round(w.CPUUsPerRec),
		"host_cgroupfs_watcher_throttle_events_per_s": telebench.Round(w.EventsPerS),
		"bpf_bench_groups":                            *groups,
		"bpf_bench_busy_groups":                       *hogs,
		"bpf_bench_period_ms":                         period.Milliseconds(),
		"bpf_bench_window_s":                          telebench.Round(b.WindowSeconds),
		"bpf_bench_kernel":                            kernel,
		"bpf_measured_on":                             fmt.Sprintf("host %s, kernel %s, cgroup v1, %d CPUs", host, kernel, runtime.NumCPU()),
	}} {
		for k, v := range m {
			sum[k] = v
		}
	}
	telebench.Ratios(sum)
	j, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(path, append(j, '\n'), 0o644); err != nil {
		return err
	}
	rep := fmt.Sprintf(`escrad telemetry backends on this host's kernel (%s), %s
%d cgroup v1 groups at a %v period, same groups and workloads; records and
flag errors with both backends running at once for %.0f s (same load), CPU with
each alone for as long (bench/telebench, as the VM part of make bench-kernel):
%d busy loops under a %d us quota (throttled every period), %d at %.1f %% duty under %d us (never)

backend   records/s  CPU us/record (alone)  user+sys us  kernel us  flag errors (busy, light)
bpf       %9.1f  %21.2f  %11.0f  %9.0f  %d (%d/%d, %d/%d)
cgroupfs  %9.1f  %21.2f  %11.0f  %9.0f  %d (%d/%d, %d/%d)

bpf: %d periods that ended throttled by the kernel's own count
(nr_throttled in the next record) were not flagged; %.1f throttle events/s
(sched_switch program %.0f us of the BPF time); %d records dropped.
cgroupfs ran its period sampler only (--throttle-poll 0); with escrad's
default throttle watcher (10 ms poll, throttle events) it cost %.2f us per
period record alone, with %.1f throttle events/s. bpf's kernel us: the
programs' run time (BPF_STATS_RUN_TIME), which includes the filter on every
hrtimer expiry of the host. Command: make bench-bpf (or the host part of
make bench-kernel).
`, kernel, time.Now().UTC().Format(time.RFC3339), *groups, *period, b.WindowSeconds,
		*hogs, telebench.BusyQuotaUs, *groups-*hogs, telebench.LightDuty*100, telebench.LightQuotaUs,
		b.PerS, b.CPUUsPerRec, b.UserSysUs, b.KernelUs, b.FlagErrors, b.BusyErrors, b.BusyRecords, b.LightErrors, b.LightRecords,
		c.PerS, c.CPUUsPerRec, c.UserSysUs, c.KernelUs, c.FlagErrors, c.BusyErrors, c.BusyRecords, c.LightErrors, c.LightRecords,
		b.VsKernel, b.EventsPerS, b.PartsUs["program_sched_switch"], b.Dropped, w.CPUUsPerRec, w.EventsPerS)
	if err := os.WriteFile(filepath.Join(*out, "bpf-report.txt"), []byte(rep), 0o644); err != nil {
		return err
	}
	fmt.Print(rep)
	say("merged bpf_* and host_cgroupfs_* into %s", path)
	return nil
}
