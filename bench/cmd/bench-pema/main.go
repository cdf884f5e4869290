// Command bench-pema reproduces PEMA's comparison at this
// machine's scale: a six-service demo-http app under open-loop Poisson
// load from a pinned client, with PEMA, RULE, OPTM and Escra sizing its
// CPU. It writes results/pema/summary.json, per-interval series and SVG
// plots (docs/pema/). `make bench-pema` runs it (root, the host engine).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/cpuwork"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/pemaapp"
	"github.com/escra-dev/escra/internal/workloadimages"
)

type opts struct {
	out, docs    string
	rps          float64
	ms           int
	interval     time.Duration
	slo          time.Duration
	omega        float64
	pemaSteps    int
	sloSteps     int
	ruleSteps    int
	dailySteps   int
	optmWindow   time.Duration
	optmTrials   int
	clientCPUs   string
	appCPUs      string
	seed         uint64
	skipDaily    bool
	recordTrace  string
	escraEnabled bool
	only         string
	hashesPerMs  int
	msCPU        float64
	curveFactors string
	curvePeriods string
	curveBursts  string
	curveDur     time.Duration
	burst        float64
	reps         int
	slo2         time.Duration
	pemag        bool
	throttlePoll time.Duration
	ruleTarget   float64
}

func (o opts) want(phase string) bool {
	if o.only == "" {
		return true
	}
	for _, p := range strings.Split(o.only, ",") {
		if strings.TrimSpace(p) == phase {
			return true
		}
	}
	return false
}

func main() {
	var o opts
	flag.StringVar(&o.out, "out", "results/pema", "results directory")
	flag.StringVar(&o.docs, "docs", "docs/pema", "where the SVG plots go")
	flag.Float64Var(&o.rps, "rps", 200, "fixed load, requests per second (Fig 11's setting; 200 gives >= 2,000 requests per 10 s interval, so an interval's p95 rests on ~100 requests above it)")
	flag.IntVar(&o.ms, "ms", 1, "CPU per request per hop in ms (times the service's scale)")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "PEMA interval (and RULE's, and the SLO window)")
	flag.DurationVar(&o.slo, "slo", 0, "p95 SLO (0: 3 × the p95 at the ample start, measured first)")
	flag.Float64Var(&o.omega, "omega", 1.5, "the app's CPU budget Ω in cores (the ample start is Ω/6 each)")
	flag.IntVar(&o.pemaSteps, "pema-steps", 36, "PEMA intervals at the fixed load (PEMA §3.3: \"a few tens of iterations\"; its CPU is the mean of the last third)")
	flag.IntVar(&o.sloSteps, "slo-steps", 6, "further PEMA intervals after the SLO is cut to 0.6× (Fig 20)")
	flag.IntVar(&o.ruleSteps, "rule-steps", 10, "RULE and Escra intervals at the fixed load (and per RULE tuning trial)")
	flag.Float64Var(&o.ruleTarget, "rule-target", 0, "RULE's HPA utilisation target in (0, 1] (PEMA §4.2); 0: tuned per SLO, the highest of 90 … 20 % whose trial holds the SLO")
	flag.IntVar(&o.dailySteps, "daily-steps", 14, "intervals of the compressed daily curve per policy")
	flag.DurationVar(&o.optmWindow, "optm-window", 4*time.Second, "OPTM: one measurement window (two per trial)")
	flag.IntVar(&o.optmTrials, "optm-trials", 50, "OPTM: at most this many trials")
	flag.StringVar(&o.clientCPUs, "client-cpus", "0", "CPUs of this process (client, controller, escrad); empty: no pinning")
	flag.StringVar(&o.appCPUs, "app-cpus", "1", "cpuset of the app's containers")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of PEMA and the load")
	flag.BoolVar(&o.skipDaily, "skip-daily", false, "skip the daily-curve runs")
	flag.StringVar(&o.recordTrace, "trace", "", "also write the PEMA loop's records (its telemetry) here")
	flag.BoolVar(&o.escraEnabled, "escra", true, "run the Escra policy too")
	flag.StringVar(&o.only, "only", "", "run only these phases (comma list of optm, pema, pemag, rule, escra, daily; needs -slo), or \"curve\" alone: the app's p95 at fixed allocations (curve.json; not part of make bench-pema)")
	flag.StringVar(&o.curveFactors, "curve", "2,1.5,1.3,1.2,1.1,1.05,1", "-only curve: allocations as factors of each service's usage at the ample start")
	flag.StringVar(&o.curvePeriods, "curve-periods", "100000,20000", "-only curve: CFS periods in µs, each factor run under each")
	flag.StringVar(&o.curveBursts, "curve-burst", "0", "-only curve: CFS burst as fractions of the quota (cpu.cfs_burst_us), each factor and period run under each")
	flag.DurationVar(&o.curveDur, "curve-duration", 20*time.Second, "-only curve: time at each point (at least 5 s)")
	flag.IntVar(&o.hashesPerMs, "hashes-per-ms", 0, "SHA-256 rounds per ms of this machine's CPU time (0: measured once by this process)")
	flag.Float64Var(&o.msCPU, "ms-cpu", 0.15, "CPU time, in ms, that one ms of -ms costs in every container (demo-http -hashes-per-ms = hashes-per-ms × this; 0.15 at 200 rps keeps the app near 0.3 core of usage, light enough for the shared app CPU at the daily curve's 1.3× peak)")
	flag.Float64Var(&o.burst, "burst", 0, "CFS burst of every policy's containers as a share of the quota, in [0, 1] (escrad --cfs-burst for PEMA and Escra; written beside Docker's quota for RULE and OPTM); 0: none, as PEMA")
	flag.IntVar(&o.reps, "reps", 3, "repetitions of the pema and pema-guarded runs (fixed load and daily curve); their keys pool the repetitions' intervals")
	flag.DurationVar(&o.slo2, "slo2", 250*time.Millisecond, "a second SLO at which OPTM, pema and pema-guarded run again (250 ms: PEMA's SockShop SLO); keys with the suffix _slo250ms; 0: none")
	flag.BoolVar(&o.pemag, "pemag", true, "run the pema-guarded policy too")
	flag.DurationVar(&o.throttlePoll, "throttle-poll", 2*time.Millisecond, "escrad's throttle watcher poll (its default; 0: no throttle events, so neither Escra nor pema-guarded raises inside a period)")
	qk := flag.Bool("quick", false, "a smoke of every phase and key in ~3 minutes (1 repetition, 2 s intervals, few steps, no Escra); not a measurement")
	resum := flag.Bool("summarize-only", false, "recompute summary.json and the plots from -out's phases.json")
	flag.Parse()
	if *qk {
		quick(&o)
	}
	if o.reps < 1 {
		fmt.Fprintln(os.Stderr, "bench-pema: -reps", o.reps, "< 1")
		os.Exit(2)
	}
	if *resum {
		if err := resummarize(o); err != nil {
			fmt.Fprintln(os.Stderr, "bench-pema:", err)
			os.Exit(1)
		}
		return
	}
	if !(o.ruleTarget >= 0 && o.ruleTarget <= 1) {
		fmt.Fprintln(os.Stderr, "bench-pema: -rule-target", o.ruleTarget, "outside [0, 1]")
		os.Exit(2)
	}
	if !(o.burst >= 0 && o.burst <= 1) {
		fmt.Fprintln(os.Stderr, "bench-pema: -burst", o.burst, "outside [0, 1]")
		os.Exit(2)
	}
	if o.only == "curve" {
		if _, _, _, err := curveFlags(o); err != nil {
			fmt.Fprintln(os.Stderr, "bench-pema:", err)
			os.Exit(2)
		}
	}
	if err := pin(o.clientCPUs); err != nil {
		fmt.Fprintln(os.Stderr, "bench-pema:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-pema:", err)
		os.Exit(1)
	}
}

// pin re-executes under taskset so the client (and the in-process
// controller and escrad) stay off the app's CPU.
func pin(cpus string) error {
	if cpus == "" || os.Getenv("ESCRA_PEMA_PINNED") == cpus {
		return nil
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("pinning the client needs taskset (util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	os.Setenv("ESCRA_PEMA_PINNED", cpus)
	return syscall.Exec(ts, append([]string{"taskset", "-c", cpus, self}, os.Args[1:]...), os.Environ())
}

func logf(format string, a ...any) {
	fmt.Printf("%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, a...)...)
}

func run(o opts) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer cli.Close()
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		return err
	}
	img, err := (&workloadimages.Builder{Docker: cli, RepoRoot: root, Log: func(s string) { logf("%s", s) }}).Build(ctx, workloadimages.DemoHTTP)
	if err != nil {
		return err
	}
	for _, d := range []string{o.out, o.docs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	stateDir, err := os.MkdirTemp("", "pema-bench-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	st, err := store.OpenBolt(stateDir)
	if err != nil {
		return err
	}
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Store = st
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	var apps []string
	for _, s := range plan(o) {
		apps = append(apps, appName(s.name))
	}
	dcli, err := containers.NewDockerClient("unix:///var/run/docker.sock")
	if err != nil {
		return err
	}
	ag, err := agent.New(agent.Config{HostID: "pema-bench", Controller: srv.TCPAddr(), Period: 100 * time.Millisecond,
		OOMDeadline: 200 * time.Millisecond, Heartbeat: time.Second, Backend: agent.BackendCgroupfs, Docker: dcli,
		Apps: apps, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), CFSBurst: o.burst, ThrottlePoll: o.throttlePoll})
	if err != nil {
		return err
	}
	actx, acancel := context.WithCancel(ctx)
	var awg sync.WaitGroup
	awg.Add(1)
	go func() { defer awg.Done(); _ = ag.Run(actx) }()
	defer func() { acancel(); awg.Wait() }()
	<-ag.Started()

	// On SIGINT/SIGTERM remove this run's containers before exiting.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		logf("interrupted: removing this run's containers")
		removeOurs(cli)
		os.Exit(130)
	}()
	// One unit of work for every container of every phase (demo-http
	// -hashes-per-ms): self-calibration at start gave copies of the same
	// service up to 2.5× different CPU per request, so "the same load" was
	// not the same work for two policies.
	if o.hashesPerMs == 0 {
		if o.hashesPerMs, err = cpuwork.PerMs(9, 30*time.Millisecond); err != nil {
			return err
		}
	}
	if !(o.msCPU > 0) || o.msCPU > 100 {
		return fmt.Errorf("-ms-cpu %v: want (0, 100]", o.msCPU)
	}
	unit := max(1, int(math.Round(float64(o.hashesPerMs)*o.msCPU)))
	loads := sampleLoad(ctx, 10*time.Second)
	e := &env{o: o, cli: cli, img: img, srv: srv, ctx: ctx,
		svcs: pemaapp.WithArgs(pemaapp.SixServices(), "-hashes-per-ms", fmt.Sprint(unit))}
	begin := time.Now()
	logf("work unit: %d SHA-256 rounds per ms of CPU time; every container burns %d per ms of -ms (%.2f ms of CPU)", o.hashesPerMs, unit, o.msCPU)
	logf("machine: %d CPUs online; client on %q, app on cpuset %q; the machine is shared with other engineers' jobs", numCPU(), o.clientCPUs, o.appCPUs)

	if o.want("curve") && o.only != "" {
		if o.only != "curve" {
			return fmt.Errorf("-only curve runs alone (got %q)", o.only)
		}
		_, err := e.curve()
		return err
	}

	// 0. The SLO: 3 × the p95 at the ample start (this shared machine's
	// latency is not known in advance; the paper's SLOs were per app).
	e.slo = o.slo
	if e.slo == 0 {
		var ph *Phase
		// An app that saturates at its ample allocation (the p95 near the
		// client's 3 s timeout) says the machine's other jobs have its CPU;
		// 3× that is no SLO. Wait for the machine a few times, then give up.
		for try := 1; ; try++ {
			if ph, err = e.fixed("baseline", "none", 4); err != nil {
				return err
			}
			ph.P95ms = ph.P95ms[1:] // the first interval opens the connections
			if median(ph.P95ms) < 1000 {
				break
			}
			if try == 5 {
				return fmt.Errorf("the app saturates at its ample allocation (p95 %.0f ms, load average %s): the machine is too busy for this benchmark", median(ph.P95ms), loadavg())
			}
			logf("baseline p95 %.0f ms (load average %s): the app does not get its CPU; waiting 30 s", median(ph.P95ms), loadavg())
			time.Sleep(30 * time.Second)
		}
		e.slo = time.Duration(3*median(ph.P95ms)*1e6) * time.Nanosecond
		e.slo = max(e.slo, 20*time.Millisecond)
		logf("baseline p95 %.1f ms at %.2f cores → SLO %v", median(ph.P95ms), mean(ph.CPU), e.slo)
	}
	var phases []*Phase
	add := func(p *Phase, err error) error {
		if err != nil {
			return err
		}
		phases = append(phases, p)
		writeJSON(filepath.Join(o.out, "phases.json"), phases)
		return nil
	}
	sloMain := e.slo
	span := time.Duration(o.dailySteps) * o.interval
	rate := daily(o.rps, span)
	ranges := []float64{0, o.rps * 0.9, o.rps * 1.8, o.rps * 3}
	for _, s := range plan(o) {
		e.slo = sloMain
		if s.set == "slo2" {
			e.slo = o.slo2
		}
		var p *Phase
		var err error
		switch {
		case s.policy == "optm":
			p, err = e.optm(s.name)
		case s.policy == "rule" && !s.daily:
			p, err = e.ruleTuned(s.name)
			if p != nil && s.set == "" {
				e.ruleTarget = p.Target
			}
		case s.policy == "rule":
			p, err = e.rule(s.name, rate, o.dailySteps, cmp.Or(e.ruleTarget, o.ruleTarget, 0.8))
		case s.policy == "rule-vpa" && !s.daily:
			p, err = e.rule(s.name, fixedRate(o.rps), o.ruleSteps, 0)
		case s.policy == "rule-vpa":
			p, err = e.rule(s.name, rate, o.dailySteps, 0)
		case s.policy == "escra" && !s.daily:
			p, err = e.escra(s.name, fixedRate(o.rps), o.ruleSteps)
		case s.policy == "escra":
			p, err = e.escra(s.name, rate, o.dailySteps)
		case s.daily:
			p, err = e.pemaRun(s.name, s.policy, rate, o.dailySteps, 0, ranges)
		default:
			sloSteps := 0
			if s.policy == "pema" && s.rep == 1 && s.set == "" {
				sloSteps = o.sloSteps // Fig 20 once
			}
			p, err = e.pemaRun(s.name, s.policy, fixedRate(o.rps), o.pemaSteps, sloSteps, nil)
		}
		if p != nil {
			p.Rep, p.Set = s.rep, s.set
		}
		if err := add(p, err); err != nil {
			return err
		}
	}
	e.slo = sloMain
	sum := summarize(e, phases)
	sum["bench_minutes"] = time.Since(begin).Minutes()
	if l := loads(); len(l) > 0 {
		sort.Float64s(l)
		sum["load_avg_1m_min"], sum["load_avg_1m_median"], sum["load_avg_1m_max"] = l[0], l[len(l)/2], l[len(l)-1]
	}
	if err := writeJSON(filepath.Join(o.out, "summary.json"), sum); err != nil {
		return err
	}
	plots(o.docs, e, phases)
	if o.recordTrace != "" {
		for _, p := range phases {
			if p.Name == "pema" {
				writeJSON(o.recordTrace, p.Records)
			}
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%-32s %v\n", k, sum[k])
	}
	return nil
}

func resummarize(o opts) error {
	b, err := os.ReadFile(filepath.Join(o.out, "phases.json"))
	if err != nil {
		return err
	}
	var ps []*Phase
	if err := json.Unmarshal(b, &ps); err != nil {
		return err
	}
	e := &env{o: o, svcs: pemaapp.SixServices()}
	for _, p := range ps {
		if p.Name == "rule" && len(p.SLOms) > 0 {
			e.slo = time.Duration(p.SLOms[0] * 1e6)
		}
	}
	sum := summarize(e, ps)
	if err := writeJSON(filepath.Join(o.out, "summary.json"), sum); err != nil {
		return err
	}
	plots(o.docs, e, ps)
	return nil
}
