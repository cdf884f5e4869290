package matrix

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/bench/policy"
	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/bench/sampler"
	"github.com/escra-dev/escra/controller/recommender"
	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/procstat"
)

// Config selects what runs.
type Config struct {
	Docker    *client.Client
	Images    map[string]string // image name → tag (internal/workloadimages)
	Workloads []string
	Loads     []string // "load" (every workload that supports it) or "workload/load"
	Policies  []string // static15 static10 static075 autopilot vpa10 vpa60 escra
	Duration  time.Duration
	Reps      int
	// Seed fixes the request schedules: every policy of a repetition
	// sees the same requests, and so does every run.
	Seed int64
	// OrderSeed fixes the order the policies of a cell run in. It is a
	// different seed from Seed so that runs can differ in order while
	// they keep the same requests: with one order seed for every run, the
	// same policy ran right after the same neighbour in every run, and
	// pooling runs averaged over nothing (docs/benchmarks.md).
	OrderSeed int64
	BasePort  int
	// AppCPUs is the cpuset of the containers under test and the batch
	// container ("" = not pinned); AppCores the number of CPUs in it: the
	// most a container can use, so the cap of every limit.
	AppCPUs  string
	AppCores float64
	// ClientCPUs are the CPUs the client runs on (bench-run is started
	// pinned there); their busy time is reported per run.
	ClientCPUs []int
	// Burst, when > 0, runs every policy's containers with a CFS burst of
	// this share of their quota (cpu.cfs_burst_us); Escra's through
	// escrad --cfs-burst, which the caller passes.
	Burst float64
	// BurstCycle is the Burst shape's cycle (calm, then a burst, half each;
	// 0: the Escra paper's 20 s).
	BurstCycle time.Duration
	// AutopilotCPU are Autopilot's CPU weights (nil: the defaults); see
	// SweepAutopilot.
	AutopilotCPU *recommender.AutopilotConfig
	// Escra, when set, names the app a cell's containers join (label
	// escra.app) and the controller and daemon PIDs to account CPU to;
	// escrad and escra-controller must be running. Nil skips Escra.
	Escra    *Escra
	Progress func(string)

	// Only, for a policy it names, lists the only cells ("workload/load")
	// that policy runs on: the quick matrix runs each policy where a key
	// of the summary reads it (modes.go). Other policies run on every
	// cell cellPolicies allows.
	Only map[string][]string

	batch *batchHolder // the +batch runs' container, kept by Run
}

type Escra struct {
	// App names the app of a cell's containers under an Escra policy.
	App func(c Cell, policy string) string
	// Budget is the app budget Ω in cores of a cell under an Escra policy.
	Budget        func(c Cell, policy string) float64
	ControllerPID int
	DaemonPID     int
	// Backend is the telemetry backend escrad chose (its start line).
	Backend string
}

// IsEscra tells Escra's policies (escra, escra-paper) from the baselines.
func IsEscra(policy string) bool { return strings.HasPrefix(policy, "escra") }

// BatchSuffix on a policy name ("escra+batch") runs that policy with a
// best-effort CPU spinner beside the app (batch.go): its quota the app
// CPUs minus Σ the app's limits, updated every 100 ms. Its runs are their
// own rows: the plain policy is measured alone, as the Escra paper measured it,
// and the +batch row shows what the freed capacity buys and what sharing
// the CPUs with it costs the app.
const BatchSuffix = "+batch"

// SplitBatch returns the policy a name runs and whether it co-locates
// the batch container.
func SplitBatch(policy string) (base string, batch bool) {
	base, batch = strings.CutSuffix(policy, BatchSuffix)
	return base, batch
}

// Static15Cores is what static15 provisions for a cell: Σ over replicas
// of 1.5 × the peak, each capped at the app's CPUs (the engine refuses
// more). Escra's budget for the cell is exactly this, so the comparison is fair.
func (c Config) Static15Cores(peaks []Peak) float64 {
	return c.StaticKCores(peaks, 1.5)
}

// appCPUCount is how many CPUs a container under test may run on: the
// pinned cpuset's size, else the host's.
func (c Config) appCPUCount() int {
	if c.AppCores >= 1 {
		return int(math.Ceil(c.AppCores))
	}
	return runtime.NumCPU()
}

func (c Config) capCores(x float64) float64 {
	if c.AppCores > 0 {
		return min(x, c.AppCores)
	}
	return x
}

// Cell is one (workload, load).
type Cell struct{ Workload, Load string }

// Peak is the profiled peak of one replica: CPU as the largest 1 s mean
// (what second-granularity monitoring shows, Escra §VI-C), memory as
// the largest 100 ms sample; CPUMon and CPUP90 are the peak and the p90
// of aligned 10 s means (60 s for trace loads), what static15mon and
// vpastatic profile with (baselines.go).
type Peak struct {
	CPU, Mem       float64
	CPUMon, CPUP90 float64 `json:",omitempty"`
}

func (c Config) progress(format string, a ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, a...))
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Cells lists the (workload, load) pairs selected.
func (c Config) Cells() []Cell {
	var out []Cell
	for _, wn := range c.Workloads {
		w, ok := WorkloadByName(wn)
		if !ok {
			continue
		}
		for _, l := range w.Loads {
			if contains(c.Loads, l) || contains(c.Loads, wn+"/"+l) {
				out = append(out, Cell{wn, l})
			}
		}
	}
	return out
}

// Validate reports unknown names.
func (c Config) Validate() error {
	for _, w := range c.Workloads {
		if _, ok := WorkloadByName(w); !ok {
			return fmt.Errorf("unknown workload %q", w)
		}
	}
	for _, p := range c.Policies {
		base, _ := SplitBatch(p)
		if IsEscra(base) {
			if b := EscraBase(base); (b != "escra" && b != "escra-paper") || (base != b && FrontierK(base) >= 1.5) {
				return fmt.Errorf("unknown policy %q (Escra frontier policies are escra-k050, escra-k075, escra-k100)", p)
			}
			continue
		}
		if _, err := c.newRecommender(base, Peak{CPU: 1, Mem: 1, CPUMon: 1, CPUP90: 1}); err != nil {
			return err
		}
	}
	if len(c.Cells()) == 0 {
		return fmt.Errorf("no (workload, load) pair selected")
	}
	return nil
}

// newRecommender makes a baseline policy for a replica with the given peak.
func (c Config) newRecommender(name string, pk Peak) (recommender.Recommender, error) {
	if k, cores, ok := staticRule(name, pk); ok {
		return &recommender.Static{K: k, PeakCPU: cores, PeakMem: pk.Mem}, nil
	}
	switch name {
	case "autopilot":
		cpu := recommender.DefaultAutopilotCPU()
		if c.AutopilotCPU != nil {
			cpu = *c.AutopilotCPU
		}
		return recommender.NewAutopilot(cpu, recommender.DefaultAutopilotMem(), time.Second), nil
	case "vpa10":
		return recommender.NewVPA(recommender.DefaultVPA(10 * time.Second)), nil
	case "vpa60":
		return recommender.NewVPA(recommender.DefaultVPA(60 * time.Second)), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want static15, static10, static075, static05, static15mon, vpastatic, autopilot, vpa10, vpa60, escra or escra-paper, each also with the suffix +batch)", name)
}

func (c Config) ports(w Workload) []int {
	var ps []int
	for i := 0; i < w.Replicas; i++ {
		ps = append(ps, c.BasePort+i)
	}
	return ps
}

func containerName(w Workload, i int) string { return fmt.Sprintf("escra-bench-%s-%d", w.Name, i) }

// start creates fresh replicas. Limits are those a user would give
// `docker run` (none for profiling, k × peak for Static, the Static 1.5×
// limits as the starting point of Autopilot, VPA and Escra, which then
// take over). Swap is not limited (the host has none; memsw would
// otherwise cap what the policies may write).
func (c Config) start(ctx context.Context, w Workload, cell Cell, policyName string, peaks []Peak) ([]string, error) {
	var ids []string
	for i := 0; i < w.Replicas; i++ {
		name := containerName(w, i)
		c.Docker.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		labels := map[string]string{"escra.bench": "1"}
		res := container.Resources{MemorySwap: -1}
		var k, memK, cores float64
		base, _ := SplitBatch(policyName)
		if i < len(peaks) {
			cores = peaks[i].CPU
		}
		switch base {
		case "autopilot", "vpa10", "vpa60":
			k = 1.5
		default:
			if IsEscra(policyName) {
				// Same starting point as Autopilot and VPA (the frontier's
				// at its k); escrad takes over.
				labels["escra.app"] = c.Escra.App(cell, policyName)
				k = FrontierK(policyName)
			} else if i < len(peaks) {
				k, cores, _ = staticRule(base, peaks[i])
			}
		}
		memK = max(k, 1.5) // memory is not what the frontier varies
		if base == "static10" || base == "static075" {
			memK = k
		}
		res.CpusetCpus = c.AppCPUs
		if k > 0 && i < len(peaks) {
			// Capped at the app's CPUs: more cannot be used (a closed-loop
			// client such as wrk can saturate them).
			res.NanoCPUs = int64(c.capCores(k*cores) * 1e9)
			res.Memory = int64(memK * peaks[i].Mem)
			res.MemorySwap = -1
		}
		cr, err := c.Docker.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: c.Images[w.Image.Name], Cmd: w.Cmd(i, c.BasePort+i, c.appCPUCount()), Labels: labels},
			HostConfig: &container.HostConfig{NetworkMode: "host", Resources: res, RestartPolicy: container.RestartPolicy{Name: "unless-stopped"}}, Name: name})
		if err != nil {
			c.remove(ids)
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		ids = append(ids, cr.ID)
		if _, err := c.Docker.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
			c.remove(ids)
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Ready(rctx, c.ports(w)); err != nil {
		c.remove(ids)
		return nil, err
	}
	return ids, nil
}

func (c Config) remove(ids []string) {
	for _, id := range ids {
		c.Docker.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
	}
}

// procCPU returns utime+stime of pid in seconds (0 when unreadable).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	st, err := procstat.Read(pid)
	if err != nil {
		return 0
	}
	return st.CPU().Seconds()
}

// Profile runs every cell once without limits and returns each replica's
// peak and usage series.
func (c Config) Profile(ctx context.Context) (map[Cell]Profile, error) {
	out := map[Cell]Profile{}
	for i, cell := range c.Cells() {
		c.progress("profile %d/%d: %s/%s without limits", i+1, len(c.Cells()), cell.Workload, cell.Load)
		t0 := time.Now()
		w, _ := WorkloadByName(cell.Workload)
		ids, err := c.start(ctx, w, cell, "profile", nil)
		if err != nil {
			return nil, err
		}
		s, err := sampler.New(ctx, c.Docker, ids)
		if err != nil {
			c.remove(ids)
			return nil, err
		}
		var mu sync.Mutex
		cpu := make([][]float64, len(ids))
		memS := make([][]float64, len(ids))
		mem := make([]float64, len(ids))
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(sctx, 100*time.Millisecond, func(snap sampler.Snapshot) {
				mu.Lock()
				defer mu.Unlock()
				for j, cs := range snap.Per {
					if cs.Valid {
						cpu[j] = append(cpu[j], cs.CPUUsage)
						memS[j] = append(memS[j], cs.MemUsage)
						mem[j] = max(mem[j], cs.MemUsage)
					}
				}
			})
		}()
		_, err = w.Client(ctx, c.clientRun(w, cell, c.Seed+ProfileSeedOffset, nil))
		stop()
		<-done
		s.Close()
		c.remove(ids)
		if err != nil {
			return nil, fmt.Errorf("profile %s/%s: %w", cell.Workload, cell.Load, err)
		}
		var peaks []Peak
		for j := range ids {
			peaks = append(peaks, peakOf(cpu[j], mem[j], cell.Load))
		}
		out[cell] = Profile{Peaks: peaks, CPU: cpu, Mem: memS}
		c.progress("profile %s/%s: peaks %s; %.1f s wall (plan %.1f s)", cell.Workload, cell.Load, fmtPeaks(peaks), time.Since(t0).Seconds(), c.runSeconds(cell, "profile"))
	}
	return out, nil
}

func fmtPeaks(ps []Peak) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%.2f cores %.0f MiB", p.CPU, p.Mem/(1<<20)))
	}
	return strings.Join(s, ", ")
}

// Run runs the matrix: every selected cell × policy × repetition.
// Policies run in a random order per repetition and cell (PolicyOrder,
// seeded by OrderSeed, so a run can be repeated), so no policy always runs
// first on a cold machine or right after a particular neighbour.
func (c Config) Run(ctx context.Context, profiles map[Cell]Profile) ([]report.Run, []string) {
	var runs []report.Run
	var notes []string
	c.batch = &batchHolder{}
	defer func() {
		if c.batch.b != nil {
			c.batch.b.close()
		}
	}()
	total := c.RunCount()
	n := 0
	for rep := 0; rep < max(1, c.Reps); rep++ {
		for ci, cell := range c.Cells() {
			order := PolicyOrder(c.cellPolicies(cell), c.OrderSeed, rep, ci)
			for pos, p := range order {
				n++
				if IsEscra(p) && c.Escra == nil {
					continue
				}
				c.progress("[%d/%d] %s/%s/%s rep %d", n, total, cell.Workload, cell.Load, p, rep+1)
				t0 := time.Now()
				run, err := c.runOne(ctx, cell, p, rep, profiles[cell])
				run.Order = pos
				run.WallS = time.Since(t0).Seconds()
				if err != nil {
					notes = append(notes, fmt.Sprintf("run %s/%s/%s rep %d failed: %v", cell.Workload, cell.Load, p, rep+1, err))
					c.progress("  failed: %v", err)
					if ctx.Err() != nil {
						return runs, notes
					}
					continue
				}
				c.progress("  p50 %.2f ms, p99.9 %.2f ms, %.1f req/s ok, %d throttled periods, %d OOM kills, %d limit changes, reserved %.2f cores, batch %.2f cores, client CPUs %.2f busy; %.1f s wall (plan %.1f s)",
					run.Client.P50Us/1000, run.Client.P999Us/1000, run.Client.ThroughputRPS, run.ThrottledPeriods, run.OOMKills, run.LimitChanges,
					run.ReservedCores, run.BatchCores, run.ClientCPUCores, run.WallS, c.runSeconds(cell, p))
				runs = append(runs, run)
			}
		}
	}
	if c.Escra == nil && c.WantsEscra() {
		notes = append(notes, "Escra runs skipped: escrad and escra-controller were not running")
	}
	return runs, notes
}

// PolicyOrder is the order a cell's policies run in at a repetition: a
// shuffle seeded by the order seed, the repetition and the cell's index.
func PolicyOrder(policies []string, orderSeed int64, rep, cell int) []string {
	order := slices.Clone(policies)
	rng := rand.New(rand.NewSource(orderSeed*1_000_003 + int64(rep)*1009 + int64(cell)))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// RunCount is how many runs Run makes.
func (c Config) RunCount() int {
	n := 0
	for _, cell := range c.Cells() {
		n += len(c.cellPolicies(cell)) * max(1, c.Reps)
	}
	return n
}

// cellPolicies is the policies a cell runs: all of them, except that a
// cell without a client skips the batch variants (no latency for the
// batch container to cost; its slack is the plain run's).
func (c Config) cellPolicies(cell Cell) []string {
	w, _ := WorkloadByName(cell.Workload)
	var out []string
	for _, p := range c.Policies {
		if _, batch := SplitBatch(p); batch && w.NoClient {
			continue
		}
		if OffsetOnly(p) && !w.Offset {
			continue
		}
		if cells, ok := c.Only[p]; ok && !contains(cells, cell.Name()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// WantsEscra: some policy of the run is one of Escra's (escrad and
// escra-controller must run).
func (c Config) WantsEscra() bool {
	for _, p := range c.Policies {
		if IsEscra(p) {
			return true
		}
	}
	return false
}

func (c Config) runOne(ctx context.Context, cell Cell, policyName string, rep int, prof Profile) (report.Run, error) {
	w, _ := WorkloadByName(cell.Workload)
	peaks := prof.Peaks
	run := report.Run{Workload: cell.Workload, Load: cell.Load, Policy: policyName, Rep: rep}
	ids, err := c.start(ctx, w, cell, policyName, peaks)
	if err != nil {
		return run, err
	}
	defer c.remove(ids)
	s, err := sampler.New(ctx, c.Docker, ids)
	if err != nil {
		return run, err
	}
	defer s.Close()
	var batch *batchRun
	base, colocate := SplitBatch(policyName)
	if colocate {
		if batch, err = c.resumeBatch(ctx); err != nil {
			return run, err
		}
		defer batch.suspend(context.WithoutCancel(ctx))
	}

	// Static limits were set by `docker create`, as a user would; the
	// recommenders take over from there through the runner, warmed up with
	// the profiled history of the same load (not measured).
	var runner *policy.Runner
	if !IsEscra(base) && !strings.HasPrefix(base, "static") {
		idx := map[string]int{}
		for i, id := range ids {
			idx[id] = i
		}
		now := time.Now()
		runner = &policy.Runner{Applier: policy.CgroupApplier{Groups: s.Group, Burst: c.Burst}, New: func(id string) recommender.Recommender {
			i := idx[id]
			var pk Peak
			if i < len(peaks) {
				pk = peaks[i]
			}
			r, _ := c.newRecommender(base, pk)
			if i < len(prof.CPU) && i < len(prof.Mem) {
				warm(r, prof.CPU[i], prof.Mem[i], now)
			}
			return r
		}}
	}
	if c.Burst > 0 && !IsEscra(base) {
		// Docker cannot set a burst: the baselines get it beside the
		// limits `docker create` set (escrad --cfs-burst does it for Escra).
		for _, id := range ids {
			g, ok := s.Group(id)
			if !ok {
				return run, fmt.Errorf("%s: no cgroup for the burst", id)
			}
			q, _, err := g.CPULimit()
			if err == nil && q > 0 {
				err = policy.SetQuota(g, q, c.Burst)
			}
			if err != nil {
				return run, fmt.Errorf("%s: cfs burst: %w", id, err)
			}
		}
	}
	rec := &sampler.Recorder{Series: containerName(w, 0)}
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
	}
	budget := 0.0
	if IsEscra(policyName) && c.Escra != nil && c.Escra.Budget != nil {
		budget = c.Escra.Budget(cell, base)
	}
	var mu sync.Mutex
	var policyCPU time.Duration
	var reserved float64
	var nReserved int
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sampler.WatchKills(sctx, c.Docker, func(id string, t time.Time) {
			if !mine[id] {
				return
			}
			mu.Lock()
			run.OOMKills++
			mu.Unlock()
			if runner != nil {
				runner.OnOOM(id, t)
			}
		})
	}()
	go func() {
		defer wg.Done()
		s.Run(sctx, 100*time.Millisecond, func(snap sampler.Snapshot) {
			if runner != nil {
				t0 := time.Now()
				runner.OnSample(snap)
				mu.Lock()
				policyCPU += time.Since(t0)
				mu.Unlock()
			}
			rec.Add(snap)
			limits, ok := 0.0, true
			for _, cs := range snap.Per {
				ok = ok && cs.Valid
				limits += c.capCores(cs.CPULimit)
			}
			if !ok {
				return
			}
			mu.Lock()
			reserved += max(limits, budget)
			nReserved++
			mu.Unlock()
			if batch != nil {
				batch.follow(ctx, c.AppCores-limits)
			}
		})
	}()
	var ctl0, dmn0 float64
	if c.Escra != nil && IsEscra(policyName) {
		ctl0, dmn0 = procCPU(c.Escra.ControllerPID), procCPU(c.Escra.DaemonPID)
	}
	busy0, self0 := cpuBusy(c.ClientCPUs), selfCPU()
	start := time.Now()
	res, cerr := w.Client(ctx, c.clientRun(w, cell, c.Seed+int64(rep), func(s string) { c.progress("  %s", s) }))
	run.DurationS = time.Since(start).Seconds()
	busy1, self1 := cpuBusy(c.ClientCPUs), selfCPU()
	time.Sleep(300 * time.Millisecond) // let the last samples and events in
	stop()
	wg.Wait()
	if cerr != nil {
		return run, cerr
	}
	run.Client = res
	if res.Tool == "none" {
		run.Client = load.Result{Tool: "none", Shape: cell.Load, DurationS: run.DurationS}
	}
	rec.Fill(&run)
	mu.Lock()
	defer mu.Unlock()
	if nReserved > 0 {
		run.ReservedCores = reserved / float64(nReserved)
	}
	if run.DurationS > 0 {
		run.ClientCPUCores = (busy1 - busy0) / run.DurationS
		run.ClientSelfCores = (self1 - self0) / run.DurationS
	}
	if batch != nil {
		run.BatchCores = batch.cores()
	}
	if c.Escra != nil && IsEscra(policyName) {
		run.ControllerCPUSeconds = procCPU(c.Escra.ControllerPID) - ctl0
		run.DaemonCPUSeconds = procCPU(c.Escra.DaemonPID) - dmn0
	} else {
		// The baselines run inside this process: the time spent in the
		// recommenders and cgroup writes stands for controller CPU.
		run.ControllerCPUSeconds = policyCPU.Seconds()
	}
	return run, nil
}
