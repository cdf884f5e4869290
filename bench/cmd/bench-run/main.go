// Command bench-run runs the benchmark matrix of issue 7 and writes
// OUT/results.json, then the report (OUT/report.md, OUT/summary.json,
// OUT/plots/) from it.
//
//	bench-run [-full] [-out results/bench] [-bin bin] [-no-escra]
//
// It builds the images, profiles every (workload, load) without limits,
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
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/bench/images"
	"github.com/escra-dev/escra/bench/matrix"
	"github.com/escra-dev/escra/bench/overhead"
	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/daemon/cgroups"
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
	full := flag.Bool("full", false, "full matrix: every load and policy, 60 s runs, 3 repetitions")
	out := flag.String("out", "results/bench", "output directory")
	bin := flag.String("bin", "bin", "directory holding escrad and escra-controller")
	noEscra := flag.Bool("no-escra", false, "do not start escrad and escra-controller (Escra runs are skipped)")
	workloads := flag.String("workloads", "", "comma list (default: demo-http,chain,nginx,redis,memwave)")
	loads := flag.String("loads", "", "comma list of loads or workload/load (default depends on -full)")
	policies := flag.String("policies", "", "comma list (default depends on -full)")
	duration := flag.Duration("duration", 0, "length of each run (default 20 s quick: one Burst cycle and one memwave period; 60 s full)")
	reps := flag.Int("reps", 0, "repetitions (default 1 quick, 3 full)")
	port := flag.Int("port", 18080, "first loopback port of the workloads")
	// δ of seed 000 §IV-C is 50 MiB for containers of GiBs; these are tens of
	// MiB (scaled down like the request rates), and with δ = 50 MiB reclaim
	// would never take anything back from them.
	safeMargin := flag.String("safe-margin", "8MiB", "reclaim margin δ given to escra-controller")
	ctlFlags := flag.String("controller-flags", "", "extra escra-controller flags, space-separated (allocator A/B runs, e.g. \"-no-lend -headroom 0\")")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}

	cfg := matrix.Config{Workloads: list("demo-http,chain,nginx,redis,memwave"), Seed: 1, BasePort: *port,
		Loads:    list("demo-http/burst,chain/burst,nginx/burst,wrk,redis-benchmark,wave"),
		Policies: list("static15,static10,autopilot,vpa10,escra"), Duration: 20 * time.Second, Reps: 1,
		Progress: func(s string) { say("%s", s) }}
	mode := "quick"
	if *full {
		mode = "full"
		cfg.Loads = list("fixed,exp,burst,trace,wrk,redis-benchmark,wave")
		cfg.Policies = list("static15,static10,static075,autopilot,vpa10,vpa60,escra")
		cfg.Duration, cfg.Reps = 60*time.Second, 3
	}
	if *workloads != "" {
		cfg.Workloads = list(*workloads)
	}
	if *loads != "" {
		cfg.Loads = list(*loads)
	}
	if *policies != "" {
		cfg.Policies = list(*policies)
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
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	cfg.Docker = cli
	root, err := images.RepoRoot(".")
	if err != nil {
		return err
	}
	say("building images")
	b := &images.Builder{Docker: cli, RepoRoot: root, Log: func(s string) { say("%s", s) }}
	if cfg.Images, err = b.BuildAll(ctx); err != nil {
		return err
	}
	cells := cfg.Cells()
	say("%s run: %d cells × %d policies × %d reps of %s, plus %d profiling runs",
		mode, len(cells), len(cfg.Policies), cfg.Reps, cfg.Duration, len(cells))
	peaks, err := cfg.Profile(ctx)
	if err != nil {
		return err
	}

	res := &report.Results{Mode: mode, Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(ctx, cli)}
	if c, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output(); err == nil {
		res.Commit = strings.TrimSpace(string(c))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Each run lasts %s; Static limits are k × the peak of a profiling run of the same workload and load without limits (CPU: largest 1 s mean; memory: largest 100 ms sample).", cfg.Duration))
	for _, cell := range cells {
		res.Notes = append(res.Notes, fmt.Sprintf("Profiled peak of %s/%s: %s.", cell.Workload, cell.Load, describe(peaks[cell])))
	}

	if contains(cfg.Policies, "escra") && !*noEscra {
		extra := strings.Fields(*ctlFlags)
		stopEscra, e, err := startEscra(ctx, cfg, peaks, *bin, *out, *safeMargin, extra)
		res.Notes = append(res.Notes, fmt.Sprintf("Escra: app budgets = Σ 1.5 × profiled peaks (what static15 provisions); reclaim margin δ = %s (seed 000: 50 MiB for containers of GiBs; these are tens of MiB), other parameters the controller's defaults (docs/allocator.md).", *safeMargin))
		if len(extra) > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("escra-controller run with the extra flags %q.", *ctlFlags))
		}
		if err != nil {
			say("Escra not started: %v", err)
			res.Notes = append(res.Notes, "Escra not started: "+err.Error())
		} else {
			defer stopEscra()
			cfg.Escra = e
		}
	}
	runs, notes := cfg.Run(ctx, peaks)
	res.Runs, res.Notes = runs, append(res.Notes, notes...)
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
	m := report.Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemBytes = si.Totalram * uint64(si.Unit)
	}
	if v, err := cli.ServerVersion(ctx); err == nil {
		m.Docker = v.Version
	}
	return m
}

// startEscra starts escra-controller with one app per workload (budget:
// Σ over replicas of 1.5 × the largest profiled peak, the same total the
// static15 baseline provisions) and one escrad on the default engine.
func startEscra(ctx context.Context, cfg matrix.Config, peaks map[matrix.Cell][]matrix.Peak, bin, out, safeMargin string, ctlFlags []string) (func(), *matrix.Escra, error) {
	ctlBin, dBin := filepath.Join(bin, "escra-controller"), filepath.Join(bin, "escrad")
	for _, p := range []string{ctlBin, dBin} {
		if _, err := os.Stat(p); err != nil {
			return nil, nil, fmt.Errorf("%s missing (make build)", p)
		}
	}
	app := func(w string) string { return "bench-" + w }
	var apps strings.Builder
	var names []string
	for _, w := range cfg.Workloads {
		var cpu, mem float64
		for cell, ps := range peaks {
			if cell.Workload != w {
				continue
			}
			var c, m float64
			for _, p := range ps {
				c += 1.5 * p.CPU
				m += 1.5 * p.Mem
			}
			cpu, mem = max(cpu, c), max(mem, m)
		}
		if cpu == 0 {
			continue
		}
		fmt.Fprintf(&apps, "- name: %s\n  cpu: \"%.3f\"\n  memory: \"%d\"\n  sigma: 0.1\n", app(w), cpu, int64(mem))
		names = append(names, app(w))
	}
	appsFile := filepath.Join(out, "escra-apps.yaml")
	if err := os.WriteFile(appsFile, []byte(apps.String()), 0o644); err != nil {
		return nil, nil, err
	}
	type proc struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	start := func(name string, args ...string) (*proc, error) {
		logf, err := os.Create(filepath.Join(out, filepath.Base(name)+".log"))
		if err != nil {
			return nil, err
		}
		p := &proc{cmd: exec.Command(name, args...), done: make(chan struct{})}
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
	ctl, err := start(ctlBin, append([]string{"-insecure", "-apps", appsFile, "-safe-margin", safeMargin}, ctlFlags...)...)
	if err != nil {
		return nil, nil, err
	}
	time.Sleep(500 * time.Millisecond)
	// --apps: this escrad manages (and, at start, restores) only the
	// benchmark's containers, whatever else runs on the engine.
	d, err := start(dBin, "-insecure", "-backend", "cgroupfs", "-apps", strings.Join(names, ","),
		"-oom-state", filepath.Join(out, "escrad.oom-armed"))
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
	say("started escra-controller (pid %d) and escrad (pid %d); apps in %s", ctl.cmd.Process.Pid, d.cmd.Process.Pid, appsFile)
	stop := func() { stopAll(d, ctl) }
	return stop, &matrix.Escra{App: app, ControllerPID: ctl.cmd.Process.Pid, DaemonPID: d.cmd.Process.Pid}, nil
}

// measureOverheads measures, on one demo-http container, the limit apply
// latency by direct cgroup write and by docker update, and the time from
// SIGKILL to serving again (what an unrescued OOM kill costs).
func measureOverheads(ctx context.Context, cfg matrix.Config, into map[string]float64) error {
	say("measuring apply latency and restart time on demo-http")
	cli := cfg.Docker
	name := "escra-bench-overhead"
	cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
	port := cfg.BasePort + 50
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: cfg.Images[images.DemoHTTP.Name],
		Cmd: []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)}, Labels: map[string]string{"escra.bench": "1"}},
		&container.HostConfig{NetworkMode: "host"}, nil, nil, name)
	if err != nil {
		return err
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return err
	}
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		return err
	}
	paths, err := cgroups.PathsForPID(in.State.Pid)
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

// overheads collects the numbers of the component benchmarks
// (results/<name>/summary.json, e.g. bench-controller, bench-daemon).
func overheads(resultsDir, self string) map[string]float64 {
	out := map[string]float64{}
	dirs, _ := os.ReadDir(resultsDir)
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == self {
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
