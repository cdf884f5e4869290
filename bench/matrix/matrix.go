package matrix

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/escra-dev/escra/bench/load"
	"github.com/escra-dev/escra/bench/policy"
	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/bench/sampler"
	"github.com/escra-dev/escra/controller/recommender"
)

// Config selects what runs.
type Config struct {
	Docker    *client.Client
	Images    map[string]string // image name → tag (bench/images)
	Workloads []string
	Loads     []string // "load" (every workload that supports it) or "workload/load"
	Policies  []string // static15 static10 static075 autopilot vpa10 vpa60 escra
	Duration  time.Duration
	Reps      int
	Seed      int64
	BasePort  int
	// Escra, when set, names the app a workload's containers join
	// (label escra.app) and the controller and daemon PIDs to account CPU
	// to; escrad and escra-controller must be running. Nil skips Escra.
	Escra    *Escra
	Progress func(string)
}

type Escra struct {
	App           func(workload string) string
	ControllerPID int
	DaemonPID     int
}

// Warmup is how long Autopilot and VPA keep the initial (Static 1.5×)
// limits before their first recommendation is applied.
const Warmup = 5 * time.Second

// Cell is one (workload, load).
type Cell struct{ Workload, Load string }

// Peak is the profiled peak of one replica: CPU as the largest 1 s mean
// (what second-granularity monitoring shows, seed 000 §VI-C), memory as
// the largest 100 ms sample.
type Peak struct{ CPU, Mem float64 }

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
		if _, err := newRecommender(p, Peak{1, 1}); err != nil && p != "escra" {
			return err
		}
	}
	if len(c.Cells()) == 0 {
		return fmt.Errorf("no (workload, load) pair selected")
	}
	return nil
}

// newRecommender makes a baseline policy for a replica with the given peak.
func newRecommender(name string, pk Peak) (recommender.Recommender, error) {
	switch name {
	case "static15":
		return &recommender.Static{K: 1.5, PeakCPU: pk.CPU, PeakMem: pk.Mem}, nil
	case "static10":
		return &recommender.Static{K: 1.0, PeakCPU: pk.CPU, PeakMem: pk.Mem}, nil
	case "static075":
		return &recommender.Static{K: 0.75, PeakCPU: pk.CPU, PeakMem: pk.Mem}, nil
	case "autopilot":
		return recommender.NewAutopilot(recommender.DefaultAutopilotCPU(), recommender.DefaultAutopilotMem(), time.Second), nil
	case "vpa10":
		return recommender.NewVPA(recommender.DefaultVPA(10 * time.Second)), nil
	case "vpa60":
		return recommender.NewVPA(recommender.DefaultVPA(60 * time.Second)), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want static15, static10, static075, autopilot, vpa10, vpa60 or escra)", name)
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
func (c Config) start(ctx context.Context, w Workload, policyName string, peaks []Peak) ([]string, error) {
	var ids []string
	for i := 0; i < w.Replicas; i++ {
		name := containerName(w, i)
		c.Docker.ContainerRemove(ctx, name, container.RemoveOptions{Force: true})
		labels := map[string]string{"escra.bench": "1"}
		res := container.Resources{MemorySwap: -1}
		var k float64
		switch policyName {
		case "static15", "autopilot", "vpa10", "vpa60":
			k = 1.5
		case "static10":
			k = 1
		case "static075":
			k = 0.75
		case "escra":
			// Same starting point as Autopilot and VPA; escrad takes over.
			labels["escra.app"] = c.Escra.App(w.Name)
			k = 1.5
		}
		if k > 0 && i < len(peaks) {
			// Capped at the host's cores: the engine refuses more (a
			// closed-loop client such as wrk can profile at ~2 cores here).
			res.NanoCPUs = int64(min(k*peaks[i].CPU, float64(runtime.NumCPU())) * 1e9)
			res.Memory = int64(k * peaks[i].Mem)
			res.MemorySwap = -1
		}
		cr, err := c.Docker.ContainerCreate(ctx, &container.Config{Image: c.Images[w.Image.Name], Cmd: w.Cmd(i, c.BasePort+i), Labels: labels},
			&container.HostConfig{NetworkMode: "host", Resources: res, RestartPolicy: container.RestartPolicy{Name: "unless-stopped"}},
			nil, nil, name)
		if err != nil {
			c.remove(ids)
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		ids = append(ids, cr.ID)
		if err := c.Docker.ContainerStart(ctx, cr.ID, container.StartOptions{}); err != nil {
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
		c.Docker.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true})
	}
}

// procCPU returns utime+stime of pid in seconds (0 when unreadable).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// Profile runs every cell once without limits and returns each replica's peak.
func (c Config) Profile(ctx context.Context) (map[Cell][]Peak, error) {
	out := map[Cell][]Peak{}
	for i, cell := range c.Cells() {
		c.progress("profile %d/%d: %s/%s without limits", i+1, len(c.Cells()), cell.Workload, cell.Load)
		w, _ := WorkloadByName(cell.Workload)
		ids, err := c.start(ctx, w, "profile", nil)
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
						mem[j] = max(mem[j], cs.MemUsage)
					}
				}
			})
		}()
		_, err = w.Client(ctx, cell.Load, c.ports(w), c.Duration, c.Seed, nil)
		stop()
		<-done
		s.Close()
		c.remove(ids)
		if err != nil {
			return nil, fmt.Errorf("profile %s/%s: %w", cell.Workload, cell.Load, err)
		}
		var peaks []Peak
		for j := range ids {
			pk := Peak{CPU: 0.05, Mem: max(mem[j], 16<<20)}
			for k := 0; k+10 <= len(cpu[j]); k++ { // 1 s windows of 100 ms samples
				sum := 0.0
				for _, v := range cpu[j][k : k+10] {
					sum += v
				}
				pk.CPU = max(pk.CPU, sum/10)
			}
			peaks = append(peaks, pk)
		}
		out[cell] = peaks
		c.progress("profile %s/%s: peaks %s", cell.Workload, cell.Load, fmtPeaks(peaks))
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
func (c Config) Run(ctx context.Context, peaks map[Cell][]Peak) ([]report.Run, []string) {
	var runs []report.Run
	var notes []string
	total := len(c.Cells()) * len(c.Policies) * max(1, c.Reps)
	n := 0
	for rep := 0; rep < max(1, c.Reps); rep++ {
		for _, cell := range c.Cells() {
			for _, p := range c.Policies {
				n++
				if p == "escra" && c.Escra == nil {
					continue
				}
				c.progress("[%d/%d] %s/%s/%s rep %d", n, total, cell.Workload, cell.Load, p, rep+1)
				run, err := c.runOne(ctx, cell, p, rep, peaks[cell])
				if err != nil {
					notes = append(notes, fmt.Sprintf("run %s/%s/%s rep %d failed: %v", cell.Workload, cell.Load, p, rep+1, err))
					c.progress("  failed: %v", err)
					if ctx.Err() != nil {
						return runs, notes
					}
					continue
				}
				c.progress("  p50 %.2f ms, p99.9 %.2f ms, %.1f req/s ok, %d throttled periods, %d OOM kills, %d limit changes",
					run.Client.P50Us/1000, run.Client.P999Us/1000, run.Client.ThroughputRPS, run.ThrottledPeriods, run.OOMKills, run.LimitChanges)
				runs = append(runs, run)
			}
		}
	}
	if c.Escra == nil && contains(c.Policies, "escra") {
		notes = append(notes, "Escra runs skipped: escrad and escra-controller were not running")
	}
	return runs, notes
}

func (c Config) runOne(ctx context.Context, cell Cell, policyName string, rep int, peaks []Peak) (report.Run, error) {
	w, _ := WorkloadByName(cell.Workload)
	run := report.Run{Workload: cell.Workload, Load: cell.Load, Policy: policyName, Rep: rep}
	ids, err := c.start(ctx, w, policyName, peaks)
	if err != nil {
		return run, err
	}
	defer c.remove(ids)
	s, err := sampler.New(ctx, c.Docker, ids)
	if err != nil {
		return run, err
	}
	defer s.Close()

	// Static limits were set by `docker create`, as a user would; the
	// recommenders take over from there through the runner.
	var runner *policy.Runner
	if policyName != "escra" && !strings.HasPrefix(policyName, "static") {
		peakOf := map[string]Peak{}
		for i, id := range ids {
			if i < len(peaks) {
				peakOf[id] = peaks[i]
			}
		}
		runner = &policy.Runner{Applier: policy.CgroupApplier{Groups: s.Group}, Warmup: Warmup, New: func(id string) recommender.Recommender {
			r, _ := newRecommender(policyName, peakOf[id])
			return r
		}}
	}
	rec := &sampler.Recorder{Series: containerName(w, 0)}
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
	}
	var mu sync.Mutex
	var policyCPU time.Duration
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
		})
	}()
	var ctl0, dmn0 float64
	if c.Escra != nil && policyName == "escra" {
		ctl0, dmn0 = procCPU(c.Escra.ControllerPID), procCPU(c.Escra.DaemonPID)
	}
	start := time.Now()
	res, cerr := w.Client(ctx, cell.Load, c.ports(w), c.Duration, c.Seed+int64(rep), func(s string) { c.progress("  %s", s) })
	run.DurationS = time.Since(start).Seconds()
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
	if c.Escra != nil && policyName == "escra" {
		run.ControllerCPUSeconds = procCPU(c.Escra.ControllerPID) - ctl0
		run.DaemonCPUSeconds = procCPU(c.Escra.DaemonPID) - dmn0
	} else {
		// The baselines run inside this process: the time spent in the
		// recommenders and cgroup writes stands for controller CPU.
		run.ControllerCPUSeconds = policyCPU.Seconds()
	}
	return run, nil
}
