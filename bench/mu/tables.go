package mu

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/escra-dev/escra/bench/load"
	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
	"github.com/escra-dev/escra/controller/server"
)

// Scaled settings (docs/mu.md): each request holds its replica ~ET (demo-
// http /mem: touch 2 MiB, hold), so a replica's capacity is concurrency/ET
// whatever the shared machine's CPU load, as with the paper's sleep-like
// functions; the pod counts then compare the autoscalers, not the noise.
const (
	t3CC, t3HoldMs = 2, 100 // Table 2: CC 10, ET 100 ms → 100 req/s; ours 20 req/s
	t5CC, t5HoldMs = 2, 500 // Table 4: CC 4, ET 500 ms → 8 req/s; ours 4 req/s
	replicaCPU     = 0.1
	replicaMem     = 64 << 20
)

// t3MuNoAdmission is Table 3's Mu run with admission off.
const t3MuNoAdmission = "mu_noadm"

func t3Trace(cfg Config) []float64 {
	// Table 3's median-error function: mean 339 req/s at 100 req/s per
	// pod (3.4 pods); ours: mean 60 at 20 req/s per pod (3 pods).
	return Synthesize(TraceSpec{Seconds: cfg.T3Seconds, Mean: 60, Min: 15, Max: 140, Period: 60, Noise: 0.12, BurstProb: 0.02, Seed: cfg.Seed})
}

func t5Traces(cfg Config) ([]float64, []float64) {
	// Table 4: W-1 41–230 (mean 154), W-2 69–182 (mean 146) at 8 req/s
	// per pod; ours × 0.13 at 4 req/s per pod.
	w1 := Synthesize(TraceSpec{Seconds: cfg.T5Seconds, Mean: 20, Min: 5.3, Max: 30, Period: 90, Noise: 0.2, BurstProb: 0.04, Seed: cfg.Seed + 1})
	w2 := Synthesize(TraceSpec{Seconds: cfg.T5Seconds, Mean: 19, Min: 9, Max: 23.7, Period: 90, Noise: 0.1, BurstProb: 0.02, Seed: cfg.Seed + 2})
	return w1, w2
}

func runTables(ctx context.Context, cfg Config, socks []string, img string, sum map[string]float64, logf func(string)) error {
	pid := os.Getpid()
	// Table 3 compares the autoscalers, each run once; Mu runs with its
	// admission (the gateway's default) and again without it (mu_noadm),
	// as the paper's Table 3, which has no 503 column.
	t3Pol := []string{mu.ASRPS, mu.ASConcurrency, mu.ASMuNoPred, mu.ASMu, t3MuNoAdmission}
	t5Pol := []string{mu.ASRPS, mu.ASConcurrency, mu.ASMu}
	var apps []string
	app := func(table, pol, w string) string {
		return fmt.Sprintf("mu-%s-%s%s-%d", table, strings.ReplaceAll(pol, "_", ""), w, pid)
	}
	for _, p := range t3Pol {
		apps = append(apps, app("t3", p, ""))
	}
	for _, p := range t5Pol {
		apps = append(apps, app("t5", p, "-w1"), app("t5", p, "-w2"))
	}
	defer removeLeftovers(socks, apps)
	c, err := startCluster(ctx, socks, apps)
	if err != nil {
		return err
	}
	defer c.stop()
	port := 24000
	plots := map[string]*series{}
	if cfg.has("t3") {
		rates := t3Trace(cfg)
		m, lo, hi := Stats(rates)
		writeTrace(cfg.Out, "t3_trace.csv", rates)
		logf(fmt.Sprintf("Table 3: one function, synthetic Azure-like trace (mean %.0f, %.0f–%.0f req/s, %d s), CC %d, ET %d ms, SLO 1 s, budget %d replicas",
			m, lo, hi, cfg.T3Seconds, t3CC, t3HoldMs, 16))
		cdfs := map[string][]float64{}
		for _, p := range t3Pol {
			name := app("t3", p, "")
			if err := c.srv.DefineApp(appSpec(name, 16)); err != nil {
				return err
			}
			as, adm := p, ""
			if p == t3MuNoAdmission {
				as, adm = mu.ASMu, gateway.AdmitOff
			}
			f := gateway.Function{Name: name, Image: img, CPUCores: replicaCPU, MemoryBytes: replicaMem, Concurrency: t3CC, MaxQueue: 100,
				SLO: time.Second, Autoscaler: as, Admission: adm, KPATarget: kpaTarget(as, t3CC, t3HoldMs), LB: mu.LBP2C, Grace: 16,
				Command: []string{"/demo-http", "-listen", "127.0.0.1:{port}"}}
			logf(fmt.Sprintf(" %s", p))
			out, ser, _, err := runPolicy(ctx, c, []fnRun{{fn: f, path: fmt.Sprintf("/mem?mib=2&hold=%d", t3HoldMs), rates: rates, seed: cfg.Seed}}, port, logf)
			port += 200
			c.srv.RemoveApp(context.Background(), name)
			if err != nil {
				return err
			}
			o := out[name]
			put(sum, p, o)
			logf(fmt.Sprintf("  %-11s within SLO %5.1f%%  p99 %6.0f ms  503 %4.1f%%  pods avg %.2f max %d  (asked avg %.2f max %d)",
				p, o.WithinSLOPct, o.P99Ms, o.Pct503, o.PodsAvg, o.PodsMax, o.ReqAvg, o.ReqMax))
			plots[p] = ser[name]
			writeRows(cfg.Out, "t3_"+p+"_seconds.csv", ser[name])
			writeRequests(cfg.Out, "t3_"+p+"_requests.csv", o.reqs)
			cdfs[p] = o.Lat
		}
		ideal := make([]int, len(rates))
		for i, r := range rates {
			ideal[i] = int(math.Ceil(r / (float64(t3CC) * 1000 / t3HoldMs)))
		}
		if err := plotPods(filepath.Join(cfg.Out, "fig3_pods.png"), "Table 3: replicas vs ideal (synthetic trace)", plots, t3Pol, ideal); err != nil {
			logf("  plot: " + err.Error())
		}
		if err := plotCDF(filepath.Join(cfg.Out, "t3_cdf.png"), "Table 3: response time CDF", cdfs, t3Pol); err != nil {
			logf("  plot: " + err.Error())
		}
	}
	if cfg.has("t5") {
		w1, w2 := t5Traces(cfg)
		writeTrace(cfg.Out, "t5_w1_trace.csv", w1)
		writeTrace(cfg.Out, "t5_w2_trace.csv", w2)
		m1, lo1, hi1 := Stats(w1)
		m2, lo2, hi2 := Stats(w2)
		logf(fmt.Sprintf("Table 5: two functions, synthetic Azure-like W1 (mean %.0f, %.0f–%.0f) and W2 (mean %.0f, %.0f–%.0f req/s), %d s, CC %d, ET %d ms, SLO 5 s, budget 6 replicas each",
			m1, lo1, hi1, m2, lo2, hi2, cfg.T5Seconds, t5CC, t5HoldMs))
		cdf1, cdf2 := map[string][]float64{}, map[string][]float64{}
		for _, p := range t5Pol {
			var runs []fnRun
			lb := mu.LBP2C
			if p == mu.ASMu {
				lb = mu.LBMu
			}
			for wi, w := range []string{"-w1", "-w2"} {
				name := app("t5", p, w)
				if err := c.srv.DefineApp(appSpec(name, 6)); err != nil {
					return err
				}
				rates := w1
				if wi == 1 {
					rates = w2
				}
				runs = append(runs, fnRun{fn: gateway.Function{Name: name, Image: img, CPUCores: replicaCPU, MemoryBytes: replicaMem,
					Concurrency: t5CC, MaxQueue: 100, SLO: 5 * time.Second, Autoscaler: p, KPATarget: kpaTarget(p, t5CC, t5HoldMs), LB: lb, Grace: 16,
					Command: []string{"/demo-http", "-listen", "127.0.0.1:{port}"}}, path: fmt.Sprintf("/mem?mib=2&hold=%d", t5HoldMs), rates: rates, seed: cfg.Seed + int64(wi)})
			}
			logf(fmt.Sprintf(" %s", p))
			out, _, fair, err := runPolicy(ctx, c, runs, port, logf)
			port += 200
			for _, r := range runs {
				c.srv.RemoveApp(context.Background(), r.fn.Name)
			}
			if err != nil {
				return err
			}
			// Eq 7 on the real allocation of the two functions.
			sum["t5_"+p+"_unfairness_cpu_cores"] = fair[0]
			sum["t5_"+p+"_inefficiency_cpu_cores"] = fair[1]
			logf(fmt.Sprintf("  %-11s Eq 7 on the real allocation: U_cpu %.3f, I_cpu %.3f cores per function", p, fair[0], fair[1]))
			for wi, r := range runs {
				o := out[r.fn.Name]
				key := fmt.Sprintf("t5_%s_w%d", p, wi+1)
				put(sum, key, o)
				writeRequests(cfg.Out, key+"_requests.csv", o.reqs)
				logf(fmt.Sprintf("  %-11s W%d within SLO %5.1f%%  mean %5.0f ms  p99 %6.0f ms  503 %4.1f%%  pods avg %.2f max %d  (asked avg %.2f max %d)",
					p, wi+1, o.WithinSLOPct, o.MeanMs, o.P99Ms, o.Pct503, o.PodsAvg, o.PodsMax, o.ReqAvg, o.ReqMax))
				if wi == 0 {
					cdf1[p] = o.Lat
				} else {
					cdf2[p] = o.Lat
				}
			}
		}
		if err := plotCDF(filepath.Join(cfg.Out, "fig8_w1_cdf.png"), "Table 5 W1: response time CDF", cdf1, t5Pol); err != nil {
			logf("  plot: " + err.Error())
		}
		if err := plotCDF(filepath.Join(cfg.Out, "fig8_w2_cdf.png"), "Table 5 W2: response time CDF", cdf2, t5Pol); err != nil {
			logf("  plot: " + err.Error())
		}
	}
	return nil
}

// kpaTarget is Knative's per-pod target: for rps the replica's capacity
// (concurrency/ET), for concurrency the container concurrency; the KPA
// multiplies either by the 70 % target utilisation.
func kpaTarget(p string, cc, holdMs int) float64 {
	switch p {
	case mu.ASRPS:
		return float64(cc) * 1000 / float64(holdMs)
	case mu.ASConcurrency:
		return float64(cc)
	}
	return 0
}

func appSpec(name string, replicas int) server.AppSpec {
	return server.AppSpec{Name: name, CPUCores: replicaCPU * float64(replicas), MemoryBytes: int64(replicas) * replicaMem, Sigma: 0.2}
}

func put(sum map[string]float64, p string, o Outcome) {
	sum[p+"_within_slo_pct"] = o.WithinSLOPct
	sum[p+"_pods_avg"] = o.PodsAvg
	sum[p+"_pods_max"] = float64(o.PodsMax)
	sum[p+"_requested_avg"] = o.ReqAvg
	sum[p+"_requested_max"] = float64(o.ReqMax)
	sum[p+"_p99_ms"] = o.P99Ms
	sum[p+"_p50_ms"] = o.P50Ms
	sum[p+"_mean_ms"] = o.MeanMs
	sum[p+"_503_pct"] = o.Pct503
	sum[p+"_error_pct"] = o.ErrPct
	sum[p+"_requests"] = float64(o.Requests)
}

func writeTrace(dir, name string, rates []float64) {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return
	}
	defer f.Close()
	load.WriteRateCSV(f, rates)
}

// writeRequests records every request as the client saw it: when it was
// sent (ms from the start of the trace), how long it took, and its status
// (0: no answer), to tell which moments of a run the misses come from.
func writeRequests(dir, name string, rs []rec) {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "sent_ms,latency_ms,status")
	for _, r := range rs {
		fmt.Fprintf(w, "%.1f,%.1f,%d\n", float64(r.At)/1e6, float64(r.Lat)/1e6, r.Code)
	}
	w.Flush()
}

// writeRows records what the autoscaler saw and asked each second, so a
// run can be read (and replayed) after the fact.
func writeRows(dir, name string, s *series) {
	if s == nil {
		return
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return
	}
	defer f.Close()
	f.WriteString(seriesHeader)
	for _, r := range s.Rows {
		f.WriteString(r + "\n")
	}
}
