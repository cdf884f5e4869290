// Command bench-run runs the benchmark matrix (docs/benchmarks.md) and writes
// OUT/results.json, then the report (OUT/report.md, OUT/summary.json,
// OUT/plots/) from it.
//
//	bench-run [-full] [-plan] [-out results/bench] [-bin bin] [-no-escra]
//
// It prints its plan (every run it will make and the estimated minutes;
// -plan prints the table per cell and exits, without Docker), builds the images, profiles every (workload, load) without limits,
// starts escra-controller (apps = the workloads, budgets = Σ 1.5 × peak)
// and escrad from -bin unless -no-escra, runs every policy, and stops what
// it started. Progress goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/bench/matrix"
	"github.com/escra-dev/escra/bench/overhead"
	"github.com/escra-dev/escra/bench/replay"
	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/workloadimages"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-run:", err)
		os.Exit(1)
	}
}

func say(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run() error {
	var err error
	full := flag.Bool("full", false, "full matrix: every load and policy, 60 s runs, 3 repetitions")
	out := flag.String("out", "results/bench", "output directory")
	bin := flag.String("bin", "bin", "directory holding escrad and escra-controller")
	noEscra := flag.Bool("no-escra", false, "do not start escrad and escra-controller (Escra runs are skipped)")
	workloads := flag.String("workloads", "", "comma list (default: demo-http,chain,nginx,redis,memwave,offset-pair,front-worker,fanout)")
	loads := flag.String("loads", "", "comma list of loads or workload/load (default depends on -full)")
	policies := flag.String("policies", "", "comma list (default depends on -full)")
	duration := flag.Duration("duration", 0, "length of each run (default 18 s quick: three 6 s Burst cycles; 60 s full)")
	reps := flag.Int("reps", 0, "repetitions (default 3)")
	port := flag.Int("port", 18080, "first loopback port of the workloads")
	// δ of Escra §IV-C is 50 MiB for containers of GiBs; these are tens of
	// MiB (scaled down like the request rates), and with δ = 50 MiB reclaim
	// would never take anything back from them.
	safeMargin := flag.String("safe-margin", "8MiB", "reclaim margin δ given to escra-controller")
	ctlFlags := flag.String("controller-flags", "", "extra escra-controller flags, space-separated (allocator A/B runs, e.g. \"-headroom 0\")")
	backend := flag.String("backend", "auto", "escrad's telemetry backend: auto (what escrad picks on this host, as a user gets it), kernel, bpf or cgroupfs")
	daemonFlags := flag.String("escrad-flags", "", "extra escrad flags, space-separated (e.g. \"-throttle-poll 2ms\")")
	clientCPUs := flag.String("client-cpus", "0", "CPUs the client (this process, vegeta, wrk, redis-benchmark) is pinned to (\"\": not pinned)")
	appCPUs := flag.String("app-cpus", "1", "CPUs of the containers under test, the batch container, escrad and escra-controller (\"\": not pinned)")
	escradCPUs := flag.String("escrad-cpus", "", "CPUs of escrad when not the app CPUs (diagnostic A/B runs; default: -app-cpus, so the daemon's cost falls on the app)")
	ctlCPUs := flag.String("controller-cpus", "", "CPUs of escra-controller (default: -client-cpus, the control node of Escra §V, where the baselines' recommenders run too; -app-cpus puts its cost on the app)")
	burstCycle := flag.Duration("burst-cycle", 0, "cycle of the Burst load, calm then burst, half each (default 6 s quick: three cycles per run; 20 s full, the Escra paper's)")
	noBatch := flag.Bool("no-batch", false, "leave out the P+batch policies (the app beside a best-effort batch container)")
	cfsBurst := flag.Float64("burst", 0, "run every policy's containers with a CFS burst of this share of their quota, in [0, 1] (escrad --cfs-burst for Escra, a cgroup write beside the baselines' limits; 0: none, as in the Escra paper)")
	orderSeed := flag.Int64("order-seed", 0, "seed of the policies' order per repetition and cell (0: a new one each run, from the clock, recorded in results.json as order_seed; give it back to replay an order). The requests stay the same in every run")
	profilesFrom := flag.String("profiles", "", "reuse the profiles (and so the budgets) of an earlier run's profiles.json instead of profiling (A/B runs at equal budgets)")
	planOnly := flag.Bool("plan", false, "print the plan (per cell: containers, policies, runs, estimated seconds) and exit without Docker")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if !*planOnly {
		if err := pin(*clientCPUs); err != nil {
			return err
		}
	}
	// escrad is the worker's agent: its cost falls on the app's CPUs. The
	// controller runs on Escra §V's control node, not on a worker; here
	// that is the client's CPUs, beside Autopilot's and VPA's recommenders
	// (this process), so every policy's control loop is off the app's CPUs.
	for _, f := range []struct {
		v   *string
		def string
	}{{escradCPUs, *appCPUs}, {ctlCPUs, *clientCPUs}} {
		if *f.v == "" {
			*f.v = f.def
		} else if _, err := cpuList(*f.v); err != nil {
			return fmt.Errorf("-escrad-cpus/-controller-cpus: %w", err)
		}
	}
	escraCPUs := *escradCPUs
	if *ctlCPUs != *escradCPUs {
		escraCPUs = "escrad " + *escradCPUs + ", controller " + *ctlCPUs
	}

	// The matrices are bench/matrix's (modes.go): the quick one runs each
	// policy on the cells a summary key needs it on.
	cfg, mode := matrix.Quick(), "quick"
	if *full {
		cfg, mode = matrix.Full(), "full"
	}
	cfg.Seed, cfg.BasePort = 1, *port
	cfg.Progress = func(s string) { say("%s", s) }
	if *burstCycle > 0 {
		cfg.BurstCycle = *burstCycle
	}
	cfg.OrderSeed = *orderSeed
	for cfg.OrderSeed == 0 {
		cfg.OrderSeed = time.Now().UnixNano() % 1_000_000_007
	}
	if !(*cfsBurst >= 0 && *cfsBurst <= 1) {
		return fmt.Errorf("-burst %v outside [0, 1]: the kernel refuses a burst above the quota", *cfsBurst)
	}
	cfg.Burst = *cfsBurst
	if cfg.ClientCPUs, err = cpuList(*clientCPUs); err != nil {
		return fmt.Errorf("-client-cpus: %w", err)
	}
	appSet, err := cpuList(*appCPUs)
	if err != nil {
		return fmt.Errorf("-app-cpus: %w", err)
	}
	cfg.AppCPUs, cfg.AppCores = *appCPUs, float64(len(appSet))
	if len(appSet) == 0 {
		cfg.AppCores = float64(hostCPUs())
	}
	if *workloads != "" {
		cfg.Workloads = list(*workloads)
	}
	if *loads != "" {
		cfg.Loads = list(*loads)
	}
	if *policies != "" {
		// Policies named on the command line run on every cell they apply to.
		cfg.Policies, cfg.Only = list(*policies), nil
	}
	if *noBatch {
		cfg.Policies = slices.DeleteFunc(cfg.Policies, func(p string) bool { _, b := matrix.SplitBatch(p); return b })
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *reps > 0 {
		cfg.Reps = *reps
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	plan := cfg.Plan(matrix.PlanOptions{Escra: cfg.WantsEscra() && !*noEscra, Profiled: *profilesFrom != ""})
	if *planOnly {
		fmt.Printf("%s matrix, order seed %d\n%s%s\n", mode, cfg.OrderSeed, plan.Table(), plan.Summary())
		return nil
	}
	t0 := time.Now()
	say("%s", plan.Summary())
	defer func() { say("took %.1f min (%s)", time.Since(t0).Minutes(), plan.Summary()) }()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	cfg.Docker = cli
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		return err
	}
	// The tree's commit now, before the minutes of profiling: scripts/bench
	// built this binary a moment ago, and a commit made during the run
	// must not be reported as the code that ran.
	commit := ""
	if c, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output(); err == nil {
		commit = strings.TrimSpace(string(c))
	}
	say("policy order seed %d (-order-seed %d replays this run's order)", cfg.OrderSeed, cfg.OrderSeed)
	say("building images")
	b := &workloadimages.Builder{Docker: cli, RepoRoot: root, Log: func(s string) { say("%s", s) }}
	if cfg.Images, err = b.BuildAll(ctx); err != nil {
		return err
	}
	cells := cfg.Cells()
	say("%s run: %d runs (%d cells, %d policies placed per cell, %d reps of %s), plus %d profiling runs",
		mode, cfg.RunCount(), len(cells), len(cfg.Policies), cfg.Reps, cfg.Duration, plan.Profiling())
	var profiles map[matrix.Cell]matrix.Profile
	if *profilesFrom != "" {
		if profiles, err = loadProfiles(*profilesFrom, cells); err != nil {
			return err
		}
		say("profiles (and budgets) from %s", *profilesFrom)
	} else if profiles, err = cfg.Profile(ctx); err != nil {
		return err
	}
	if err := saveProfiles(filepath.Join(*out, "profiles.json"), profiles); err != nil {
		return err
	}
	if contains(cfg.Policies, "autopilot") {
		choice := matrix.SweepAutopilot(profiles)
		cfg.AutopilotCPU = &choice.CPU
		say("autopilot weights: %s", choice)
		defer func() {
			autopilotNote = "Autopilot's CPU weights were swept once on the profiles and the best kept: " + choice.String() + "."
		}()
	}

	res := &report.Results{Mode: mode, Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(ctx, cli),
		Commit: commit, Pinning: report.Pinning{ClientCPUs: *clientCPUs, AppCPUs: *appCPUs, EscraCPUs: escraCPUs}, OrderSeed: cfg.OrderSeed}
	res.Notes = append(res.Notes, fmt.Sprintf("Each run lasts %s; Static limits are k × the peak of a profiling run of the same workload and load without limits (CPU: largest 1 s mean; memory: largest 100 ms sample), capped at the app's %g CPUs.", cfg.Duration, cfg.AppCores))
	if cfg.BurstCycle > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("The Burst load cycles every %s (calm, then a burst, half each; the Escra paper: 20 s), so every run holds %.1f cycles.", cfg.BurstCycle, cfg.Duration.Seconds()/cfg.BurstCycle.Seconds()))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Pinning: the client (bench-run with vegeta, the sampler and the baseline recommenders; wrk and redis-benchmark) on CPUs %q; the containers under test and the batch container on CPUs %q; escrad and escra-controller on %q.", *clientCPUs, *appCPUs, escraCPUs))
	res.Notes = append(res.Notes, fmt.Sprintf("Policies run in a random order per repetition and cell (order seed %d, new each run unless -order-seed is given; the requests are the same in every run); Autopilot", cfg.OrderSeed)+" and VPA start warm: their recommenders are fed the profiling run of the same load as history (not measured) and their first recommendation applies at the first sample.")
	if slices.ContainsFunc(cfg.Policies, func(p string) bool { _, b := matrix.SplitBatch(p); return b }) {
		res.Notes = append(res.Notes, "A policy named P+batch runs P with a best-effort batch container (a CPU spinner, cpu.shares 2, cpu.idle 1) beside the app on the app CPUs; its quota is the app CPUs minus Σ the app's container limits, moved every 100 ms: its CPU is what the capacity the policy leaves unreserved buys, and its row's latency what sharing the CPUs with it costs the app. Every other policy runs the app alone, as the Escra paper measured it.")
	}
	for _, cell := range cells {
		res.Notes = append(res.Notes, fmt.Sprintf("Profiled peak of %s/%s: %s.", cell.Workload, cell.Load, describe(profiles[cell].Peaks)))
		st := cfg.Static15Cores(profiles[cell].Peaks)
		w, _ := matrix.WorkloadByName(cell.Workload)
		b := report.CellBudget{Workload: cell.Workload, Load: cell.Load, Static15LimitCores: st, EscraBudgetCores: st, Offset: w.Offset}
		if w.Offset {
			if o := replay.OracleShare(replay.Profile{Workload: cell.Workload, Load: cell.Load, CPU: profiles[cell].CPU}, cfg.AppCores); o > 0 {
				b.OracleShare = o
			}
		}
		res.Budgets = append(res.Budgets, b)
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Baselines and how each was profiled, all on one profiling run per cell without limits, its requests seeded %d + %d, a seed no measured repetition uses (they use %d + rep): "+
		"static15, static10, static075, static05 are 1.5, 1, 0.75, 0.5 × each container's largest 1 s sliding mean of its 100 ms usage; "+
		"static15mon is 1.5 × the largest 10 s aligned mean (60 s for trace loads), as a monitoring pipeline reports it; "+
		"vpastatic is 1.15 × the p90 of those aligned means, VPA's recommender rule applied once; "+
		"Autopilot and VPA start warm from the same run. escra-k050, escra-k075, escra-k100 are Escra with exactly static05's, static075's, static10's reservation as the app budget (escra: static15's). "+
		"The frontier policies and static15mon and vpastatic run on the cells whose containers peak apart (offset-pair, front-worker, fanout) only.", cfg.Seed, matrix.ProfileSeedOffset, cfg.Seed))

	if len(cfg.Only) > 0 {
		var placed []string
		for _, p := range cfg.Policies {
			if cells, ok := cfg.Only[p]; ok {
				placed = append(placed, p+" on "+strings.Join(cells, ", "))
			}
		}
		res.Notes = append(res.Notes, "The "+mode+" matrix runs some policies on some cells only (docs/benchmarks.md, \"What the quick matrix runs and why\"): "+strings.Join(placed, "; ")+".")
	}
	res.CFSBurst = cfg.Burst
	if cfg.Burst > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Every policy's containers ran with a CFS burst of %g × their quota (cpu.cfs_burst_us): Escra's through escrad --cfs-burst, the baselines' written beside their limits.", cfg.Burst))
	}
	if cfg.WantsEscra() && !*noEscra {
		extra := strings.Fields(*ctlFlags)
		dflags := strings.Fields(*daemonFlags)
		if cfg.Burst > 0 {
			dflags = append(dflags, fmt.Sprintf("-cfs-burst=%g", cfg.Burst))
		}
		stopEscra, e, err := startEscra(ctx, cfg, profiles, escraOpts{bin: *bin, out: *out, safeMargin: *safeMargin,
			escradCPUs: *escradCPUs, ctlCPUs: *ctlCPUs, ctlFlags: extra, backend: *backend, daemonFlags: dflags})
		res.Notes = append(res.Notes, fmt.Sprintf("Escra: one app per cell and Escra policy, its budget exactly Σ static15 limits of that cell; reclaim margin δ = %s (the Escra paper: 50 MiB for containers of GiBs; these are tens of MiB), other parameters the controller's defaults (docs/allocator.md).", *safeMargin))
		if len(extra) > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("escra-controller run with the extra flags %q.", *ctlFlags))
		}
		if *daemonFlags != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("escrad run with the extra flags %q.", *daemonFlags))
		}
		if e != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("escrad's backend: %s (asked for %s).", e.Backend, *backend))
		}
		if err != nil {
			say("Escra not started: %v", err)
			res.Notes = append(res.Notes, "Escra not started: "+err.Error())
		} else {
			defer stopEscra()
			cfg.Escra = e
		}
	}
	runs, notes := cfg.Run(ctx, profiles)
	res.Runs, res.Notes = runs, append(res.Notes, notes...)
	if autopilotNote != "" {
		res.Notes = append(res.Notes, autopilotNote)
	}
	res.Overheads = overheads(filepath.Dir(filepath.Clean(*out)), filepath.Base(filepath.Clean(*out)))
	if err := measureOverheads(ctx, cfg, res.Overheads); err != nil {
		res.Notes = append(res.Notes, "overhead measurement failed: "+err.Error())
	}
	if len(res.Runs) == 0 {
		return fmt.Errorf("no run succeeded: %s", strings.Join(notes, "; "))
	}
	path := filepath.Join(*out, "results.json")
	if err := res.Save(path); err != nil {
		return err
	}
	if err := report.Generate(res, *out); err != nil {
		return err
	}
	say("wrote %s, %s/report.md, %s/summary.json and %s/plots", path, *out, *out, *out)
	return ctx.Err()
}

// autopilotNote is set once the sweep is known (for the report's notes).
var autopilotNote string

// pin re-executes this command under taskset on cpus unless it already
// runs there, so every thread (vegeta's workers, the sampler) and every
// child (wrk, redis-benchmark) stays on the client's CPUs.
func pin(cpus string) error {
	if cpus == "" || os.Getenv("ESCRA_BENCH_PINNED") == cpus {
		return nil
	}
	set, err := cpuList(cpus)
	if err != nil {
		return fmt.Errorf("-client-cpus: %w", err)
	}
	for _, c := range set {
		if c >= hostCPUs() {
			return fmt.Errorf("-client-cpus %q: this machine has CPUs 0-%d", cpus, hostCPUs()-1)
		}
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("pinning the client needs taskset (util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	os.Setenv("ESCRA_BENCH_PINNED", cpus)
	return syscall.Exec(ts, append([]string{"taskset", "-c", cpus, self}, os.Args[1:]...), os.Environ())
}

// hostCPUs counts the online CPUs of the machine (runtime.NumCPU counts
// only those this pinned process may use).
func hostCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	cs, err := cpuList(strings.TrimSpace(string(b)))
	if err != nil || len(cs) == 0 {
		return runtime.NumCPU()
	}
	return len(cs)
}

// cpuList parses "0", "1-3", "0,2" into CPU numbers.
func cpuList(s string) ([]int, error) {
	var out []int
	for _, part := range list(s) {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a CPU list (e.g. 0 or 1-3 or 0,2)", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a CPU list (e.g. 0 or 1-3 or 0,2)", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func describe(ps []matrix.Peak) string {
	var s []string
	for i, p := range ps {
		s = append(s, fmt.Sprintf("replica %d %.2f cores, %.0f MiB", i, p.CPU, p.Mem/(1<<20)))
	}
	return strings.Join(s, "; ")
}

func machine(ctx context.Context, cli *client.Client) report.Machine {
	m := report.Machine{CPUs: hostCPUs(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemBytes = si.Totalram * uint64(si.Unit)
	}
	if v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
		m.Docker = v.Version
	}
	return m
}

// startEscra starts escra-controller with one app per cell and Escra
// policy (budget: exactly what static15 provisions for that cell) and one
// escrad on the default engine, both pinned to the app CPUs.
type escraOpts struct {
	bin, out, safeMargin, backend string
	escradCPUs, ctlCPUs           string // taskset lists ("" = not pinned)
	ctlFlags, daemonFlags         []string
}

func startEscra(ctx context.Context, cfg matrix.Config, profiles map[matrix.Cell]matrix.Profile, o escraOpts) (func(), *matrix.Escra, error) {
	bin, out := o.bin, o.out
	ctlBin, dBin := filepath.Join(bin, "escra-controller"), filepath.Join(bin, "escrad")
	for _, p := range []string{ctlBin, dBin} {
		if _, err := os.Stat(p); err != nil {
			return nil, nil, fmt.Errorf("%s missing (make build)", p)
		}
	}
	// App names are DNS labels: escra+batch's app is b-…-escra-batch.
	app := func(c matrix.Cell, policy string) string {
		return "b-" + c.Workload + "-" + c.Load + "-" + strings.ReplaceAll(policy, "+", "-")
	}
	budget := func(c matrix.Cell, policy string) float64 { return cfg.EscraBudget(profiles[c].Peaks, policy) }
	var apps strings.Builder
	var names []string
	for _, c := range cfg.Cells() {
		mem := 0.0
		for _, p := range profiles[c].Peaks {
			mem += 1.5 * p.Mem
		}
		for _, pol := range cfg.Policies {
			if !matrix.IsEscra(pol) {
				continue
			}
			fmt.Fprintf(&apps, "- name: %s\n  cpu: \"%.3f\"\n  memory: \"%d\"\n  sigma: 0.1\n  allocator:\n    policy: %s\n", app(c, pol), budget(c, pol), int64(mem), matrix.EscraBase(pol))
			names = append(names, app(c, pol))
		}
	}
	appsFile := filepath.Join(out, "escra-apps.yaml")
	if err := os.WriteFile(appsFile, []byte(apps.String()), 0o644); err != nil {
		return nil, nil, err
	}
	type proc struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	start := func(cpus, name string, args ...string) (*proc, error) {
		logf, err := os.Create(filepath.Join(out, filepath.Base(name)+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(name, args...)
		if cpus != "" { // taskset execs the binary: same PID
			cmd = exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		p.cmd.Stdout, p.cmd.Stderr = logf, logf
		if err := p.cmd.Start(); err != nil {
			logf.Close()
			return nil, err
		}
		go func() { p.cmd.Wait(); logf.Close(); close(p.done) }()
		return p, nil
	}
	// stop ends the processes this command started, by PID: SIGTERM, then SIGKILL.
	stopAll := func(ps ...*proc) {
		for _, p := range ps {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range ps {
			select {
			case <-p.done:
			case <-time.After(3 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
	// -store none: the benchmark's apps live as long as this run.
	ctl, err := start(o.ctlCPUs, ctlBin, append([]string{"-insecure", "-store", "none", "-apps", appsFile, "-safe-margin", o.safeMargin}, o.ctlFlags...)...)
	if err != nil {
		return nil, nil, err
	}
	time.Sleep(500 * time.Millisecond)
	// --apps: this escrad manages (and, at start, restores) only the
	// benchmark's containers, whatever else runs on the engine.
	d, err := start(o.escradCPUs, dBin, append([]string{"-insecure", "-backend", o.backend, "-apps", strings.Join(names, ","),
		"-oom-state", filepath.Join(out, "escrad.oom-armed")}, o.daemonFlags...)...)
	if err != nil {
		stopAll(ctl)
		return nil, nil, err
	}
	time.Sleep(time.Second)
	for _, p := range []*proc{ctl, d} {
		select {
		case <-p.done:
			stopAll(ctl, d)
			return nil, nil, fmt.Errorf("%s exited at start (log in %s)", p.cmd.Path, out)
		default:
		}
	}
	chosen := daemonBackend(filepath.Join(out, "escrad.log"))
	say("started escra-controller (pid %d) and escrad (pid %d, backend %s); apps in %s", ctl.cmd.Process.Pid, d.cmd.Process.Pid, chosen, appsFile)
	stop := func() { stopAll(d, ctl) }
	return stop, &matrix.Escra{App: app, Budget: budget, ControllerPID: ctl.cmd.Process.Pid, DaemonPID: d.cmd.Process.Pid, Backend: chosen}, nil
}

// savedProfile is one cell's profile in profiles.json.
type savedProfile struct {
	Workload, Load string
	matrix.Profile
}

func saveProfiles(path string, profiles map[matrix.Cell]matrix.Profile) error {
	var l []savedProfile
	for c, p := range profiles {
		l = append(l, savedProfile{c.Workload, c.Load, p})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].Workload+"/"+l[i].Load < l[j].Workload+"/"+l[j].Load })
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// loadProfiles reads profiles.json; every cell of this run must be in it.
func loadProfiles(path string, cells []matrix.Cell) (map[matrix.Cell]matrix.Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-profiles: %w", err)
	}
	var l []savedProfile
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("-profiles %s: %w", path, err)
	}
	m := map[matrix.Cell]matrix.Profile{}
	for _, p := range l {
		p.FillRules(p.Load)
		m[matrix.Cell{Workload: p.Workload, Load: p.Load}] = p.Profile
	}
	for _, c := range cells {
		p := m[c]
		if len(p.Peaks) == 0 {
			return nil, fmt.Errorf("-profiles %s: no profile of %s/%s", path, c.Workload, c.Load)
		}
		// The warm-up and the Autopilot sweep read one CPU and one memory
		// series per replica.
		if len(p.CPU) != len(p.Peaks) || len(p.Mem) != len(p.Peaks) {
			return nil, fmt.Errorf("-profiles %s: %s/%s has %d peaks but %d CPU and %d memory series", path, c.Workload, c.Load, len(p.Peaks), len(p.CPU), len(p.Mem))
		}
	}
	return m, nil
}

// daemonBackend reads the backend escrad chose from its start line
// ("escrad starting" … backend=X), "unknown" if it is not there.
func daemonBackend(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "escrad starting") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "backend="); ok {
				return v
			}
		}
	}
	return "unknown"
}

// measureOverheads measures, on one demo-http container, the limit apply
// latency by direct cgroup write and by docker update, and the time from
// SIGKILL to serving again (what an unrescued OOM kill costs).
func measureOverheads(ctx context.Context, cfg matrix.Config, into map[string]float64) error {
	say("measuring apply latency and restart time on demo-http")
	cli := cfg.Docker
	name := "escra-bench-overhead"
	cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	port := cfg.BasePort + 50
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: cfg.Images[workloadimages.DemoHTTP.Name],
		Cmd: []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)}, Labels: map[string]string{"escra.bench": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "host"}, Name: name})
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return err
	}
	in, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil {
		return err
	}
	paths, err := cgroups.PathsForPID(in.Container.State.Pid)
	if err != nil {
		return err
	}
	g, err := cgroups.Open(paths)
	if err != nil {
		return err
	}
	defer g.Close()
	direct, docker, err := overhead.ApplyLatency(ctx, cli, c.ID, g, 50)
	if err != nil {
		return err
	}
	into["apply_latency_direct_write_us"] = float64(direct.Nanoseconds()) / 1e3
	into["apply_latency_docker_update_us"] = float64(docker.Nanoseconds()) / 1e3
	var rs []float64
	for i := 0; i < 3; i++ {
		d, err := overhead.RestartToServe(ctx, cli, c.ID, port)
		if err != nil {
			return err
		}
		rs = append(rs, float64(d.Microseconds())/1e3)
	}
	sort.Float64s(rs)
	into["killed_container_restart_to_serve_ms"] = rs[1]
	say("apply: direct %v, docker update %v; restart to serve %.0f ms", direct, docker, rs[1])
	return nil
}

// componentBench names the results directories of the component
// benchmarks (make bench-controller, bench-daemon, bench-kernel).
var componentBench = map[string]bool{"controller": true, "daemon": true, "kernel": true}

// overheads collects the numbers of the component benchmarks
// (results/<name>/summary.json, e.g. bench-controller, bench-daemon).
func overheads(resultsDir, self string) map[string]float64 {
	out := map[string]float64{}
	dirs, _ := os.ReadDir(resultsDir)
	for _, d := range dirs {
		// Only the component benchmarks: other runs of this one (a smoke
		// run in results/x) are not overheads.
		if !d.IsDir() || d.Name() == self || !componentBench[d.Name()] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(resultsDir, d.Name(), "summary.json"))
		if err != nil {
			continue
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		for k, v := range m {
			if f, ok := v.(float64); ok {
				out[d.Name()+"_"+k] = f
			}
		}
	}
	return out
}
