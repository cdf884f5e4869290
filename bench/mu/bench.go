package mu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
	"github.com/escra-dev/escra/controller/mu/placesim"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/workloadimages"
)

// Config is one bench-mu run.
type Config struct {
	Out       string
	RepoRoot  string
	T3Seconds int // Table 3 trace length per policy
	T5Seconds int // Table 5 trace length per policy
	LBSeconds int // per load balancer
	SimCases  int
	Hosts     int // extra engines from scripts/hosts.sh (0: the main engine only)
	Parts     []string
	Seed      int64
	// Reps is how many times Tables 3 and 5 run each policy (≥ 1); each
	// repetition runs the policies in its own shuffled order and with its
	// own arrivals, the same for every policy of that repetition.
	Reps int
	// WarmSeconds: every policy run starts warm, with InitialScale
	// replicas and this long at the trace's opening rate before the
	// trace, neither measured (0: from zero, measured from the first
	// request).
	WarmSeconds int
	// OrderSeed seeds the shuffles (bench-mu prints and stores it; give
	// it back to replay a run's order).
	OrderSeed int64
	Log       func(string)
	// Trace, when set, is an Azure Functions per-minute invocations file
	// (AzureTrace): Fig. 2 runs over its functions and Tables 3 and 5
	// replay its rows instead of the synthetic traces.
	Trace TraceConfig
}

// TraceConfig is how bench-mu cuts a real trace (every choice is printed
// and kept in summary.json).
type TraceConfig struct {
	File     string
	Function string  // Table 3's row or hash; "" = Fig. 2's median function
	Scale    float64 // Table 3's count multiplier; ≤ 0 = fit the machine
	MinuteAs int     // seconds one trace minute lasts (Mu §3.3: 1)
	Start    int     // first minute (0-based); < 0 = WindowRule's window
	// MinInvocations selects Fig. 2's functions (default: the paper's 100,000).
	MinInvocations float64
	DocsDir        string // Fig. 2's SVG is also written here (docs/mu)
}

func (c Config) has(p string) bool {
	if len(c.Parts) == 0 {
		return true
	}
	for _, x := range c.Parts {
		if x == p {
			return true
		}
	}
	return false
}

const mainSock = "unix:///var/run/docker.sock"

// rec is one request as the client saw it.
type rec struct {
	At   time.Duration
	Lat  time.Duration
	Code int // 0: transport error or timeout
}

// drive sends one request at each offset (open loop: the schedule does not
// wait for answers) and returns them all.
func drive(ctx context.Context, hc *http.Client, url string, sched []time.Duration) []rec {
	out := make([]rec, len(sched))
	start := time.Now()
	var wg sync.WaitGroup
	for i, off := range sched {
		if d := time.Until(start.Add(off)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return out[:i]
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			r := rec{At: t0.Sub(start)}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := hc.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				r.Code = resp.StatusCode
			}
			r.Lat = time.Since(t0)
			out[i] = r
		}()
	}
	wg.Wait()
	return out
}

// Outcome summarises one function under one policy.
type Outcome struct {
	Requests     int
	WithinSLOPct float64 // 2xx within the SLO / all requests (503s count as misses)
	P50Ms, P99Ms float64 // of the requests not refused with 503
	MeanMs       float64
	Pct503       float64
	ErrPct       float64 // transport errors and other 5xx
	PodsAvg      float64 // ready replicas, sampled every second
	PodsMax      int
	ReqAvg       float64 // replicas the autoscaler asked for
	ReqMax       int
	Lat          []float64 `json:"-"` // sorted ms of non-503 answers, for CDFs
	reqs         []rec     // every request, in the order sent
}

func summarise(rs []rec, slo time.Duration) Outcome {
	o := Outcome{Requests: len(rs), reqs: rs}
	var within, r503, errs int
	var sum float64
	for _, r := range rs {
		switch {
		case r.Code == http.StatusServiceUnavailable:
			r503++
			continue
		case r.Code >= 200 && r.Code < 400:
			if r.Lat <= slo {
				within++
			}
		default:
			errs++
		}
		ms := float64(r.Lat) / 1e6
		o.Lat = append(o.Lat, ms)
		sum += ms
	}
	sort.Float64s(o.Lat)
	if n := len(rs); n > 0 {
		o.WithinSLOPct = 100 * float64(within) / float64(n)
		o.Pct503 = 100 * float64(r503) / float64(n)
		o.ErrPct = 100 * float64(errs) / float64(n)
	}
	if len(o.Lat) > 0 {
		o.MeanMs = sum / float64(len(o.Lat))
		o.P50Ms = quant(o.Lat, 0.5)
		o.P99Ms = quant(o.Lat, 0.99)
	}
	return o
}

func quant(s []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// series is what the sampler saw each second for one function.
type series struct {
	Ready, Desired []int
	Rate           []float64
	ExecMs         []float64 // ET_avg the queue proxies report (0 before the first)
	Rows           []string  // one CSV row a second: what the autoscaler saw and asked
}

// seriesHeader names the columns of series.Rows.
const seriesHeader = "t_s,ready,pending,desired,rate_rps,predicted_rps,queued,capacity_rps,exec_ms,n_ir,n_queue\n"

func sample(ctx context.Context, g *gateway.Gateway, names []string) map[string]*series {
	out := map[string]*series{}
	for _, n := range names {
		out[n] = &series{}
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
			for _, s := range g.Statuses() {
				x := out[s.Name]
				x.Ready = append(x.Ready, s.Ready)
				x.Desired = append(x.Desired, s.Desired)
				x.Rate = append(x.Rate, s.RateRPS)
				x.ExecMs = append(x.ExecMs, s.ExecMs)
				x.Rows = append(x.Rows, fmt.Sprintf("%d,%d,%d,%d,%.1f,%.1f,%d,%.2f,%.1f,%d,%d", len(x.Ready), s.Ready, s.Pending, s.Desired,
					s.RateRPS, s.PredictedRPS, s.Queued, s.CapacityRPS, s.ExecMs, s.NIR, s.NQueue))
			}
		}
	}
}

// measured drops the requests sent in the first warm seconds and puts
// the others' send times on the trace's clock.
func measured(rs []rec, warm int) []rec {
	w := time.Duration(warm) * time.Second
	out := rs[:0]
	for _, r := range rs {
		if r.At >= w {
			r.At -= w
			out = append(out, r)
		}
	}
	return out
}

// trim drops the first warm seconds' samples and numbers the rows from
// the trace's start.
func (s *series) trim(warm int) {
	if warm <= 0 || s == nil {
		return
	}
	n := min(warm, len(s.Ready))
	s.Ready, s.Desired, s.Rate = s.Ready[n:], s.Desired[n:], s.Rate[n:]
	s.ExecMs = s.ExecMs[min(n, len(s.ExecMs)):]
	rows := s.Rows[min(n, len(s.Rows)):]
	for i, r := range rows {
		if _, rest, ok := strings.Cut(r, ","); ok {
			rows[i] = fmt.Sprintf("%d,%s", i+1, rest)
		}
	}
	s.Rows = rows
}

func podStats(xs []int) (avg float64, mx int) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		avg += float64(x)
		mx = max(mx, x)
	}
	return avg / float64(len(xs)), mx
}

// cluster is the real control plane: the controller in this process and
// one escrad agent per engine, managing only this run's apps.
type cluster struct {
	srv  *server.Server
	cl   *adminclient.Client
	stop func()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startCluster(ctx context.Context, socks []string, apps []string) (*cluster, error) {
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = quietLog()
	sctx, scancel := context.WithCancel(ctx)
	srv, err := server.Start(sctx, cfg)
	if err != nil {
		scancel()
		return nil, err
	}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		scancel()
		srv.Close()
	}
	for i, sock := range socks {
		dcli, err := containers.NewDockerClient(sock)
		if err != nil {
			stop()
			return nil, err
		}
		a, err := agent.New(agent.Config{HostID: fmt.Sprintf("mu-h%d", i), Controller: srv.TCPAddr(), Period: 100 * time.Millisecond,
			OOMDeadline: time.Second, Heartbeat: time.Second, Backend: agent.BackendCgroupfs, Docker: dcli, Log: quietLog(),
			Apps: apps, ThrottlePoll: 10 * time.Millisecond})
		if err != nil {
			dcli.Close()
			stop()
			return nil, fmt.Errorf("escrad on %s: %w", sock, err)
		}
		actx, acancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = a.Run(actx); close(done) }()
		stops = append(stops, func() { acancel(); <-done; dcli.Close() })
		select {
		case <-a.Started():
		case <-time.After(30 * time.Second):
			stop()
			return nil, fmt.Errorf("escrad on %s did not start", sock)
		}
	}
	cl, err := adminclient.New(srv.AdminAddr())
	if err != nil {
		stop()
		return nil, err
	}
	// Wait until every host is connected.
	deadline := time.Now().Add(20 * time.Second)
	for {
		hs, err := cl.Hosts(ctx)
		if err == nil && len(hs) == len(socks) {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("only %d of %d hosts connected to the controller", len(hs), len(socks))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return &cluster{srv: srv, cl: cl, stop: stop}, nil
}

// fnRun is one function of a policy run.
type fnRun struct {
	fn    gateway.Function
	path  string
	rates []float64
	seed  int64
}

// NodeSelectFor is where a policy's replicas go: Mu's own Alignment for
// Mu (§3.5.2), the Kubernetes default scores (least allocated +
// balanced) for the Knative baselines, whose pods the default scheduler
// places.
func NodeSelectFor(autoscaler string) string {
	if autoscaler == mu.ASMu || autoscaler == mu.ASMuNoPred {
		return gateway.DefaultNodeSelect
	}
	return "default"
}

// runPolicy runs the functions' traces at once through one gateway with
// the given autoscaler and returns per-function outcomes and series.
// The last result is Eq 7 on the real allocation (CPU cores per function),
// averaged over the epochs after the warm-up.
func runPolicy(ctx context.Context, c *cluster, fns []fnRun, basePort, warm int, logf func(string)) (map[string]Outcome, map[string]*series, [2]float64, error) {
	var specs []gateway.Function
	var names []string
	for _, f := range fns {
		specs = append(specs, f.fn)
		names = append(names, f.fn.Name)
	}
	sc := &gateway.ControllerScaler{Client: c.cl, Prefix: "mu-", BasePort: basePort, ProxyPath: "/escra-queue-proxy"}
	var fair [2]float64
	g, err := gateway.New(specs, sc, quietLog())
	if err != nil {
		return nil, nil, fair, err
	}
	if err := g.SetNodeSelect(NodeSelectFor(fns[0].fn.Autoscaler)); err != nil {
		return nil, nil, fair, err
	}
	// Warm start: the initial replicas are ready before the first request
	// and before the first epoch, so no autoscaler sees a cold start.
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = g.Prescale(pctx)
	pcancel()
	if err != nil {
		logf("  initial scale: " + err.Error())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fair, err
	}
	hs := &http.Server{Handler: g}
	go hs.Serve(ln)
	gctx, gcancel := context.WithCancel(ctx)
	gdone := make(chan struct{})
	go func() { g.Run(gctx); close(gdone) }()
	sctx, scancel := context.WithCancel(ctx)
	var ser map[string]*series
	sdone := make(chan struct{})
	go func() { ser = sample(sctx, g, names); close(sdone) }()

	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	recs := make([][]rec, len(fns))
	// Eq 7's averages cover the measured trace, not the warm-up.
	if warm > 0 {
		reset := time.AfterFunc(time.Duration(warm)*time.Second, g.ResetFairness)
		defer reset.Stop()
	}
	var wg sync.WaitGroup
	for i, f := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rates := append(WarmUp(f.rates, warm), f.rates...)
			shape := load.RateCSV{Label: f.fn.Name, Rates: rates, Seed: f.seed}
			sched := shape.Schedule(time.Duration(len(rates)) * time.Second)
			recs[i] = measured(drive(ctx, hc, "http://"+ln.Addr().String()+"/fn/"+f.fn.Name+f.path, sched), warm)
		}()
	}
	prog := time.NewTicker(15 * time.Second)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
loop:
	for {
		select {
		case <-finished:
			break loop
		case <-prog.C:
			var b []string
			for _, s := range g.Statuses() {
				b = append(b, fmt.Sprintf("%s: %d ready, want %d, %.0f req/s, %d refused", s.Name, s.Ready, s.Desired, s.RateRPS, s.Rejected))
			}
			logf("  " + strings.Join(b, "; "))
		}
	}
	prog.Stop()
	scancel()
	<-sdone
	gcancel()
	<-gdone
	hs.Close()
	shctx, shcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer shcancel()
	if err := g.Shutdown(shctx); err != nil {
		logf("  removing replicas: " + err.Error())
	}
	out := map[string]Outcome{}
	for i, f := range fns {
		o := summarise(recs[i], f.fn.SLO)
		s := ser[f.fn.Name]
		s.trim(warm)
		o.PodsAvg, o.PodsMax = podStats(s.Ready)
		o.ReqAvg, o.ReqMax = podStats(s.Desired)
		out[f.fn.Name] = o
	}
	_, _, fair[0], fair[1] = g.Fairness()
	return out, ser, fair, nil
}

// Run runs the parts and writes results/mu.
func Run(ctx context.Context, cfg Config) (map[string]float64, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string) {}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	sum := map[string]float64{}
	started := time.Now()
	if cfg.has("sim") {
		logf(fmt.Sprintf("placement simulator (§3.5.3): 40 nodes, 300 functions, %d cases", cfg.SimCases))
		pc := placesim.Paper()
		pc.Cases = cfg.SimCases
		res, err := placesim.Run(pc)
		if err != nil {
			return nil, err
		}
		for _, a := range placesim.Algorithms {
			m := res[a]
			sum["sim_unfairness_"+a] = m.UnfairCPU
			sum["sim_inefficiency_"+a] = m.IneffCPU
			sum["sim_unfairness_mem_mib_"+a] = m.UnfairMem
			sum["sim_inefficiency_mem_mib_"+a] = m.IneffMem
			sum["sim_pods_placed_"+a] = m.PodsPlaced
			logf(fmt.Sprintf("  %-14s U_cpu %6.2f cores  I_cpu %6.2f cores  U_mem %7.1f MiB  I_mem %6.1f MiB  pods %.0f", a, m.UnfairCPU, m.IneffCPU, m.UnfairMem, m.IneffMem, m.PodsPlaced))
		}
		sum["sim_cases"] = float64(cfg.SimCases)
	}
	var tr *AzureTrace
	if cfg.Trace.File != "" {
		var err error
		if tr, err = ReadAzureTrace(cfg.Trace.File); err != nil {
			return nil, err
		}
		logf(fmt.Sprintf("trace %s: %d functions, %d minutes", cfg.Trace.File, len(tr.Fns), len(tr.Fns[0].Counts)))
	}
	var median *PredAccuracy
	if tr != nil && (cfg.has("pred") || (cfg.has("t3") && cfg.Trace.Function == "")) {
		th := cfg.Trace.MinInvocations
		if th <= 0 {
			th = PaperMinInvocations
		}
		accs := PredictorAccuracies(tr, th)
		if m, ok := MedianFunction(accs); ok {
			median = &m
		}
		if cfg.has("pred") {
			logf(fmt.Sprintf("predictor accuracy (Mu Fig. 2): %d functions with at least %.0f invocations", len(accs), th))
			PutPredictor(sum, accs, th)
			dirs := []string{cfg.Out}
			if cfg.Trace.DocsDir != "" {
				dirs = append(dirs, cfg.Trace.DocsDir)
			}
			title := fmt.Sprintf("Mu Fig. 2: next-minute MAE reduction vs naive, %d functions ≥ %.0f invocations (%s)", len(accs), th, filepath.Base(cfg.Trace.File))
			if err := WritePredictor(accs, title, dirs...); err != nil {
				return nil, err
			}
			if median != nil {
				logf(fmt.Sprintf("  median reduction %.2f%% (row %d); %.0f better, %.0f the same, %.0f worse", median.ReductionPct, median.Row,
					sum["predictor_functions_better"], sum["predictor_functions_same"], sum["predictor_functions_worse"]))
			}
		}
	}
	if !cfg.has("lb") && !cfg.has("t3") && !cfg.has("t5") {
		return sum, writeSummary(cfg.Out, sum)
	}
	dc, err := client.New(client.WithHost(mainSock))
	if err != nil {
		return nil, err
	}
	defer dc.Close()
	b := &workloadimages.Builder{Docker: dc, RepoRoot: cfg.RepoRoot, Log: logf}
	img, err := b.Build(ctx, workloadimages.MuFunction)
	if err != nil {
		return nil, err
	}
	if cfg.has("lb") {
		if err := runLB(ctx, cfg, dc, img, sum, logf); err != nil {
			return nil, err
		}
	}
	if cfg.has("t3") || cfg.has("t5") {
		socks := []string{mainSock}
		if cfg.Hosts > 0 {
			hs, err := hostsUp(cfg, img, logf)
			if err != nil {
				logf("  hosts.sh failed, the main engine only: " + err.Error())
			} else {
				socks = hs
				defer hostsDown(cfg, logf)
			}
		}
		sum["hosts"] = float64(len(socks))
		tt, err := pickTraces(cfg, tr, median, sum, logf)
		if err != nil {
			return nil, err
		}
		if err := runTables(ctx, cfg, socks, img, tt, sum, logf); err != nil {
			return nil, err
		}
	}
	sum["duration_s"] = time.Since(started).Seconds()
	return sum, writeSummary(cfg.Out, sum)
}

// writeSummary writes summary.json; keys of parts not run this time are
// kept from the file already there (MU_PARTS re-runs one part).
func writeSummary(dir string, sum map[string]float64) error {
	if old, err := os.ReadFile(filepath.Join(dir, "summary.json")); err == nil {
		var prev map[string]float64
		if json.Unmarshal(old, &prev) == nil {
			for k, v := range prev {
				if _, ok := sum[k]; !ok {
					sum[k] = v
				}
			}
		}
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644)
}

// hostsEnv keeps scripts/hosts.sh's engines apart from anyone else's.
func hostsEnv() []string {
	return append(os.Environ(), "ESCRA_HOSTS_NAME=mu-hosts", "ESCRA_HOSTS_TAG=mu-", "ESCRA_HOSTS_METRICS_BASE=0")
}

func hostsUp(cfg Config, img string, logf func(string)) ([]string, error) {
	logf(fmt.Sprintf("starting %d engines with scripts/hosts.sh (mu-hosts)", cfg.Hosts))
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(cfg.RepoRoot, "scripts/hosts.sh"), args...)
		cmd.Dir, cmd.Env = cfg.RepoRoot, hostsEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("hosts.sh %s: %v: %s", strings.Join(args, " "), err, lastLines(string(out), 3))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("up", fmt.Sprint(cfg.Hosts), "--no-escrad"); err != nil {
		hostsDown(cfg, logf)
		return nil, err
	}
	if _, err := run("load", img); err != nil {
		hostsDown(cfg, logf)
		return nil, err
	}
	var socks []string
	for n := 1; n <= cfg.Hosts; n++ {
		s, err := run("sock", fmt.Sprint(n))
		if err != nil {
			hostsDown(cfg, logf)
			return nil, err
		}
		socks = append(socks, lastLines(s, 1))
	}
	return socks, nil
}

func hostsDown(cfg Config, logf func(string)) {
	cmd := exec.Command(filepath.Join(cfg.RepoRoot, "scripts/hosts.sh"), "down")
	cmd.Dir, cmd.Env = cfg.RepoRoot, hostsEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		logf("  hosts.sh down: " + lastLines(string(out), 2))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " / ")
}

// runLB is §3.4.1's experiment on real replicas: two "fast" and two
// "slow" ones, the fast with twice the capacity. The difference is in the
// queue proxy's concurrency (2 vs 1) with requests that hold their slot
// for a fixed time (demo-http /mem: touch 1 MiB, hold 50 ms): 40 vs 20
// req/s whatever else loads this shared machine (CFS quotas were tried
// first; with the host's load above its cores the quotas never bind and
// every replica runs at the same contended speed). The replicas carry no
// escra.app label, so nothing resizes them. Every policy has its own
// gateway on the same replica set; the load (Poisson, 85 % of the nominal
// capacity) goes to one gateway at a time in 10 s slices, the order
// rotating each round, so each policy sees the same mix of the machine's
// quiet and busy moments.
func runLB(ctx context.Context, cfg Config, dc *client.Client, img string, sum map[string]float64, logf func(string)) error {
	const holdMs = 50
	conc := []int{2, 2, 1, 1}
	capRPS := 0.0
	for _, c := range conc {
		capRPS += float64(c) * 1000 / holdMs
	}
	rate := 0.85 * capRPS
	const slice = 10
	rounds := max(1, cfg.LBSeconds/slice)
	logf(fmt.Sprintf("load balancers (§3.4.1): 2 fast (concurrency 2) + 2 slow (concurrency 1) replicas, /mem hold %d ms, %.0f req/s Poisson, %d rounds of %d s per policy", holdMs, rate, rounds, slice))
	base := 23000 + 2*rand.Intn(2000)
	var reps []gateway.Replica
	var ids []string
	defer func() {
		for _, id := range ids {
			dc.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
		}
	}()
	for i, c := range conc {
		qp, fp := base+2*i, base+2*i+1
		name := fmt.Sprintf("mu-lb-%d-%d", os.Getpid(), i)
		cc := &container.Config{Image: img, Labels: map[string]string{"escra.bench": "mu-lb"},
			Entrypoint: []string{"/escra-queue-proxy", "-listen", fmt.Sprintf("127.0.0.1:%d", qp), "-upstream", fmt.Sprintf("http://127.0.0.1:%d", fp),
				"-concurrency", fmt.Sprint(c), "-max-queue", "1000", "--", "/demo-http", "-listen", fmt.Sprintf("127.0.0.1:%d", fp)}}
		hc := &container.HostConfig{NetworkMode: "host"}
		hc.Resources.Memory = 128 << 20
		cr, err := dc.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cc, HostConfig: hc, Name: name})
		if err != nil {
			return fmt.Errorf("lb replica %s: %w", name, err)
		}
		ids = append(ids, cr.ID)
		if _, err := dc.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
			return fmt.Errorf("lb replica %s: %w", name, err)
		}
		reps = append(reps, gateway.Replica{ID: name, Addr: fmt.Sprintf("127.0.0.1:%d", qp)})
	}
	pols := []string{mu.LBRoundRob, mu.LBLeastConn, mu.LBP2C, mu.LBMu}
	urls := map[string]string{}
	gws := map[string]*gateway.Gateway{}
	for _, pol := range pols {
		// Function concurrency 2 is the bound of the fast replicas; the
		// slow ones' lower capacity must be learnt from their metrics.
		// No admission: every balancer gets every request.
		f := gateway.Function{Name: "lb", CPUCores: 0.1, MemoryBytes: 64 << 20, Concurrency: 2, SLO: 5 * time.Second,
			Autoscaler: mu.ASMuNoPred, Admission: gateway.AdmitOff, LB: pol, MinReplicas: len(reps), MaxReplicas: len(reps)}
		g, err := gateway.New([]gateway.Function{f}, &gateway.StaticScaler{Replicas: reps}, quietLog())
		if err != nil {
			return err
		}
		g.Tick(ctx) // adds the whole set
		deadline := time.Now().Add(60 * time.Second)
		for g.Statuses()[0].Ready < len(reps) {
			if time.Now().After(deadline) {
				return fmt.Errorf("lb replicas not ready: %+v", g.Statuses()[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: g}
		go hs.Serve(ln)
		defer hs.Close()
		urls[pol] = "http://" + ln.Addr().String() + fmt.Sprintf("/fn/lb/mem?mib=1&hold=%d", holdMs)
		gws[pol] = g
	}
	hcl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	all := map[string][]rec{}
	for r := 0; r < rounds; r++ {
		for k := range pols {
			pol := pols[(r+k)%len(pols)]
			shape := load.Exp{RPS: rate, Seed: cfg.Seed + int64(r*len(pols)+k)}
			rs := drive(ctx, hcl, urls[pol], shape.Schedule(slice*time.Second))
			all[pol] = append(all[pol], rs...)
			time.Sleep(time.Second) // let the queues drain between slices
		}
	}
	for _, pol := range pols {
		o := summarise(all[pol], 5*time.Second)
		sum["lb_"+pol+"_p99_ms"] = o.P99Ms
		sum["lb_"+pol+"_p50_ms"] = o.P50Ms
		sum["lb_"+pol+"_mean_ms"] = o.MeanMs
		var fast, slow uint64
		for _, s := range gws[pol].Statuses()[0].Replicas {
			// The pool's order is the order replicas became ready.
			if s.ID == reps[0].ID || s.ID == reps[1].ID {
				fast += s.Sent
			} else {
				slow += s.Sent
			}
		}
		if fast+slow > 0 {
			sum["lb_"+pol+"_fast_share_pct"] = 100 * float64(fast) / float64(fast+slow)
		}
		logf(fmt.Sprintf("  %-9s p50 %6.0f ms  p99 %6.0f ms  mean %6.0f ms  %d requests, %.0f%% to the fast replicas (nominal 67%%)", pol, o.P50Ms, o.P99Ms, o.MeanMs, o.Requests, sum["lb_"+pol+"_fast_share_pct"]))
		writeCDF(filepath.Join(cfg.Out, "lb_"+pol+"_latency_ms.txt"), o.Lat)
	}
	return nil
}

func writeCDF(path string, lat []float64) {
	var b strings.Builder
	for _, v := range lat {
		fmt.Fprintf(&b, "%.2f\n", v)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
}

// removeLeftovers removes containers of apps this run defined (a crash
// mid-run); only those labels are touched.
func removeLeftovers(socks []string, apps []string) {
	for _, s := range socks {
		dc, err := client.New(client.WithHost(s))
		if err != nil {
			continue
		}
		for _, a := range apps {
			list, _ := dc.ContainerList(context.Background(), client.ContainerListOptions{All: true,
				Filters: make(client.Filters).Add("label", containers.AppLabel+"="+a)})
			for _, c := range list.Items {
				dc.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
			}
		}
		dc.Close()
	}
}
