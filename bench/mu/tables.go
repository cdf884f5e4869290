package mu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/escra-dev/escra/bench/report"
	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/load"
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

// repOrder is the policies' order in repetition r (from 1): shuffled by
// the run's order seed, so no policy always runs first, last or after the
// same one on a machine whose state drifts.
func repOrder(pols []string, seed int64, r int) []string {
	o := append([]string(nil), pols...)
	rng := rand.New(rand.NewSource(seed*1000003 + int64(r)))
	rng.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// repName is a per-repetition file name: rep 1 keeps the plain name.
func repName(base string, r int) string {
	if r == 1 {
		return base
	}
	return fmt.Sprintf("%s_r%d", base, r)
}

func runTables(ctx context.Context, cfg Config, socks []string, img string, tt tableTraces, sum map[string]float64, logf func(string)) error {
	pid := os.Getpid()
	reps := max(cfg.Reps, 1)
	// Table 3 compares the autoscalers; Mu runs with its admission (the
	// gateway's default) and again without it (mu_noadm), as the
	// paper's Table 3, which has no 503 column.
	t3Pol := []string{mu.ASRPS, mu.ASConcurrency, mu.ASMuNoPred, mu.ASMu, t3MuNoAdmission}
	t5Pol := []string{mu.ASRPS, mu.ASConcurrency, mu.ASMu}
	var apps []string
	app := func(table, pol, w string, r int) string {
		return fmt.Sprintf("mu-%s-%s%s-r%d-%d", table, strings.ReplaceAll(pol, "_", ""), w, r, pid)
	}
	for r := 1; r <= reps; r++ {
		for _, p := range t3Pol {
			apps = append(apps, app("t3", p, "", r))
		}
		for _, p := range t5Pol {
			apps = append(apps, app("t5", p, "-w1", r), app("t5", p, "-w2", r))
		}
	}
	defer removeLeftovers(socks, apps)
	c, err := startCluster(ctx, socks, apps)
	if err != nil {
		return err
	}
	defer c.stop()
	sum["reps"] = float64(reps)
	sum["warm_s"] = float64(cfg.WarmSeconds)
	sum["order_seed"] = float64(cfg.OrderSeed)
	var perRep []repRecord
	port := 24000
	if cfg.has("t3") {
		rates := tt.t3
		m, lo, hi := Stats(rates)
		writeTrace(cfg.Out, "t3_trace.csv", rates)
		logf(fmt.Sprintf("Table 3: one function, %s trace (mean %.0f, %.0f–%.0f req/s, %d s), CC %d, ET %d ms, SLO 1 s, budget %d replicas, %d repetition(s), warm start: %d replicas, %d s unmeasured",
			tt.label, m, lo, hi, len(rates), t3CC, t3HoldMs, 16, reps, initialScale(cfg, rates, t3CC, t3HoldMs), cfg.WarmSeconds))
		plots := map[string]*series{}
		var allSeries []*series
		cdfs := map[string][]float64{}
		outs := map[string][]Outcome{}
		for r := 1; r <= reps; r++ {
			ord := repOrder(t3Pol, cfg.OrderSeed, r)
			logf(fmt.Sprintf(" repetition %d of %d: %s", r, reps, strings.Join(ord, ", ")))
			for pos, p := range ord {
				name := app("t3", p, "", r)
				if err := c.srv.DefineApp(appSpec(name, 16)); err != nil {
					return err
				}
				as, adm := p, ""
				if p == t3MuNoAdmission {
					as, adm = mu.ASMu, gateway.AdmitOff
				}
				f := gateway.Function{Name: name, Image: img, CPUCores: replicaCPU, MemoryBytes: replicaMem, Concurrency: t3CC, MaxQueue: 100,
					SLO: time.Second, Autoscaler: as, Admission: adm, KPATarget: kpaTarget(as, t3CC, t3HoldMs), LB: mu.LBP2C, Grace: 16,
					InitialScale: initialScale(cfg, rates, t3CC, t3HoldMs), Command: []string{"/demo-http", "-listen", "127.0.0.1:{port}"}}
				logf(fmt.Sprintf(" %s", p))
				// The arrivals are the repetition's: every policy of a
				// repetition gets the same requests at the same offsets.
				out, ser, _, err := runPolicy(ctx, c, []fnRun{{fn: f, path: fmt.Sprintf("/mem?mib=2&hold=%d", t3HoldMs), rates: rates, seed: cfg.Seed + 1000*int64(r-1)}}, port, cfg.WarmSeconds, logf)
				port += 200
				c.srv.RemoveApp(context.Background(), name)
				if err != nil {
					return err
				}
				o := out[name]
				outs[p] = append(outs[p], o)
				perRep = append(perRep, repRecord{Table: "t3", Key: p, Rep: r, Position: pos + 1, Outcome: o})
				logf(fmt.Sprintf("  %-11s within SLO %5.1f%%  p99 %6.0f ms  503 %4.1f%%  pods avg %.2f max %d  (asked avg %.2f max %d)",
					p, o.WithinSLOPct, o.P99Ms, o.Pct503, o.PodsAvg, o.PodsMax, o.ReqAvg, o.ReqMax))
				if r == 1 {
					plots[p] = ser[name]
				}
				allSeries = append(allSeries, ser[name])
				writeRows(cfg.Out, repName("t3_"+p, r)+"_seconds.csv", ser[name])
				writeRequests(cfg.Out, repName("t3_"+p, r)+"_requests.csv", o.reqs)
				cdfs[p] = append(cdfs[p], o.Lat...)
			}
		}
		for _, p := range t3Pol {
			putReps(sum, p, outs[p])
		}
		for _, b := range []string{mu.ASRPS, mu.ASConcurrency} {
			putPaired(sum, "mu_vs_"+b, outs[mu.ASMu], outs[b])
			sum["t3_mu_vs_"+b+"_pods_avg_ratio"] = sum["mu_vs_"+b+"_pods_avg_ratio"]
		}
		for _, p := range t3Pol {
			sum["t3_"+p+"_pods_max"], sum["t3_"+p+"_pods_avg"] = sum[p+"_pods_max"], sum[p+"_pods_avg"]
		}
		for p := range cdfs {
			sort.Float64s(cdfs[p])
		}
		// Fig. 3's ideal: the known arrival rate over the replicas'
		// serving rate, concurrency / ET with the ET the replicas had
		// (Mu §3.3 derives its 100 responses/s from the average
		// execution time of 100 ms); the nominal hold is kept beside it.
		nominal := float64(t3CC) * 1000 / t3HoldMs
		etMs := meanExecMs(allSeries)
		served := nominal
		if etMs > 0 {
			served = float64(t3CC) * 1000 / etMs
		}
		ideal := IdealPods(rates, served)
		ia, imx := podStats(ideal)
		na, nmx := podStats(IdealPods(rates, nominal))
		sum["t3_ideal_pods_avg"], sum["t3_ideal_pods_max"] = ia, float64(imx)
		sum["t3_ideal_nominal_pods_avg"], sum["t3_ideal_nominal_pods_max"] = na, float64(nmx)
		sum["t3_exec_ms_measured"], sum["t3_replica_rps_measured"], sum["t3_replica_rps_nominal"] = etMs, served, nominal
		logf(fmt.Sprintf("  ideal (Fig. 3: arrival rate / serving rate per replica): at the measured ET %.1f ms (%.2f req/s per replica) pods avg %.2f max %d; at the nominal %d ms (%.0f req/s) avg %.2f max %d",
			etMs, served, ia, imx, t3HoldMs, nominal, na, nmx))
		if err := plotPods(filepath.Join(cfg.Out, "fig3_pods.png"), "Table 3: replicas vs ideal ("+tt.label+" trace, repetition 1)", plots, t3Pol, ideal); err != nil {
			logf("  plot: " + err.Error())
		}
		for _, d := range []string{cfg.Out, cfg.Trace.DocsDir} {
			if d == "" {
				continue
			}
			if err := svgPods(filepath.Join(d, "fig3_pods.svg"), "Table 3: ready replicas vs ideal ("+tt.label+" trace, repetition 1)", plots, t3Pol, ideal); err != nil {
				logf("  plot: " + err.Error())
			}
		}
		if err := plotCDF(filepath.Join(cfg.Out, "t3_cdf.png"), "Table 3: response time CDF", cdfs, t3Pol); err != nil {
			logf("  plot: " + err.Error())
		}
	}
	if cfg.has("t5") {
		w1, w2 := tt.w1, tt.w2
		writeTrace(cfg.Out, "t5_w1_trace.csv", w1)
		writeTrace(cfg.Out, "t5_w2_trace.csv", w2)
		m1, lo1, hi1 := Stats(w1)
		m2, lo2, hi2 := Stats(w2)
		logf(fmt.Sprintf("Table 5: two functions, %s W1 (mean %.0f, %.0f–%.0f) and W2 (mean %.0f, %.0f–%.0f req/s), %d s, CC %d, ET %d ms, SLO 5 s, budget 6 replicas each, %d repetition(s), warm start: %d and %d replicas, %d s unmeasured",
			tt.label, m1, lo1, hi1, m2, lo2, hi2, len(w1), t5CC, t5HoldMs, reps, initialScale(cfg, w1, t5CC, t5HoldMs), initialScale(cfg, w2, t5CC, t5HoldMs), cfg.WarmSeconds))
		cdf1, cdf2 := map[string][]float64{}, map[string][]float64{}
		outs := map[string][]Outcome{}
		fairs := map[string][][2]float64{}
		for r := 1; r <= reps; r++ {
			ord := repOrder(t5Pol, cfg.OrderSeed+1, r)
			logf(fmt.Sprintf(" repetition %d of %d: %s", r, reps, strings.Join(ord, ", ")))
			for pos, p := range ord {
				var runs []fnRun
				lb := mu.LBP2C
				if p == mu.ASMu {
					lb = mu.LBMu
				}
				for wi, w := range []string{"-w1", "-w2"} {
					name := app("t5", p, w, r)
					if err := c.srv.DefineApp(appSpec(name, 6)); err != nil {
						return err
					}
					rates := w1
					if wi == 1 {
						rates = w2
					}
					runs = append(runs, fnRun{fn: gateway.Function{Name: name, Image: img, CPUCores: replicaCPU, MemoryBytes: replicaMem,
						Concurrency: t5CC, MaxQueue: 100, SLO: 5 * time.Second, Autoscaler: p, KPATarget: kpaTarget(p, t5CC, t5HoldMs), LB: lb, Grace: 16,
						InitialScale: initialScale(cfg, rates, t5CC, t5HoldMs), Command: []string{"/demo-http", "-listen", "127.0.0.1:{port}"}}, path: fmt.Sprintf("/mem?mib=2&hold=%d", t5HoldMs), rates: rates,
						seed: cfg.Seed + int64(wi) + 1000*int64(r-1)})
				}
				logf(fmt.Sprintf(" %s", p))
				out, _, fair, err := runPolicy(ctx, c, runs, port, cfg.WarmSeconds, logf)
				port += 200
				for _, x := range runs {
					c.srv.RemoveApp(context.Background(), x.fn.Name)
				}
				if err != nil {
					return err
				}
				fairs[p] = append(fairs[p], fair)
				logf(fmt.Sprintf("  %-11s Eq 7 on the real allocation: U_cpu %.3f, I_cpu %.3f cores per function", p, fair[0], fair[1]))
				for wi, x := range runs {
					o := out[x.fn.Name]
					key := fmt.Sprintf("t5_%s_w%d", p, wi+1)
					outs[key] = append(outs[key], o)
					perRep = append(perRep, repRecord{Table: "t5", Key: key, Rep: r, Position: pos + 1, Outcome: o})
					writeRequests(cfg.Out, repName(key, r)+"_requests.csv", o.reqs)
					logf(fmt.Sprintf("  %-11s W%d within SLO %5.1f%%  mean %5.0f ms  p99 %6.0f ms  503 %4.1f%%  pods avg %.2f max %d  (asked avg %.2f max %d)",
						p, wi+1, o.WithinSLOPct, o.MeanMs, o.P99Ms, o.Pct503, o.PodsAvg, o.PodsMax, o.ReqAvg, o.ReqMax))
					if wi == 0 {
						cdf1[p] = append(cdf1[p], o.Lat...)
					} else {
						cdf2[p] = append(cdf2[p], o.Lat...)
					}
				}
			}
		}
		for _, p := range t5Pol {
			// Eq 7 on the real allocation of the two functions.
			var u, in []float64
			for _, f := range fairs[p] {
				u, in = append(u, f[0]), append(in, f[1])
			}
			sum["t5_"+p+"_unfairness_cpu_cores"] = report.MeanCI(u).Mean
			sum["t5_"+p+"_inefficiency_cpu_cores"] = report.MeanCI(in).Mean
			for wi := 1; wi <= 2; wi++ {
				putReps(sum, fmt.Sprintf("t5_%s_w%d", p, wi), outs[fmt.Sprintf("t5_%s_w%d", p, wi)])
			}
		}
		// Table 5's bottom line: the share of both functions' requests
		// served within the SLO, Mu against each baseline, paired by
		// repetition.
		both := map[string][]Outcome{}
		for _, p := range t5Pol {
			for r := range outs["t5_"+p+"_w1"] {
				both[p] = append(both[p], pooled(outs["t5_"+p+"_w1"][r], outs["t5_"+p+"_w2"][r]))
			}
			putReps(sum, "t5_"+p+"_both", both[p])
		}
		for _, b := range []string{mu.ASRPS, mu.ASConcurrency} {
			putPaired(sum, "t5_mu_vs_"+b, both[mu.ASMu], both[b])
		}
		for _, m := range []map[string][]float64{cdf1, cdf2} {
			for p := range m {
				sort.Float64s(m[p])
			}
		}
		if err := plotCDF(filepath.Join(cfg.Out, "fig8_w1_cdf.png"), "Table 5 W1: response time CDF", cdf1, t5Pol); err != nil {
			logf("  plot: " + err.Error())
		}
		if err := plotCDF(filepath.Join(cfg.Out, "fig8_w2_cdf.png"), "Table 5 W2: response time CDF", cdf2, t5Pol); err != nil {
			logf("  plot: " + err.Error())
		}
	}
	return writeReps(cfg.Out, perRep)
}

// repRecord is one policy run of one repetition, as reps.json keeps it.
type repRecord struct {
	Table    string `json:"table"`
	Key      string `json:"key"`
	Rep      int    `json:"rep"`
	Position int    `json:"position"` // in the repetition's shuffled order
	Outcome
}

func writeReps(dir string, rs []repRecord) error {
	if len(rs) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "reps.json"), append(b, '\n'), 0o644)
}

// putReps writes key's figures over the repetitions: each the mean of the
// per-run figure, with `_ci95`, the half-width of its 95 % t interval,
// beside the ones the floors read; `_pods_max` is the highest peak of any
// repetition.
func putReps(sum map[string]float64, key string, runs []Outcome) {
	if len(runs) == 0 {
		return
	}
	col := func(f func(Outcome) float64) report.Stat {
		xs := make([]float64, len(runs))
		for i, o := range runs {
			xs[i] = f(o)
		}
		return report.MeanCI(xs)
	}
	mean := Outcome{Requests: int(col(func(o Outcome) float64 { return float64(o.Requests) }).Mean)}
	within := col(func(o Outcome) float64 { return o.WithinSLOPct })
	p99 := col(func(o Outcome) float64 { return o.P99Ms })
	pods := col(func(o Outcome) float64 { return o.PodsAvg })
	mean.WithinSLOPct, mean.P99Ms, mean.PodsAvg = within.Mean, p99.Mean, pods.Mean
	mean.P50Ms = col(func(o Outcome) float64 { return o.P50Ms }).Mean
	mean.MeanMs = col(func(o Outcome) float64 { return o.MeanMs }).Mean
	mean.Pct503 = col(func(o Outcome) float64 { return o.Pct503 }).Mean
	mean.ErrPct = col(func(o Outcome) float64 { return o.ErrPct }).Mean
	mean.ReqAvg = col(func(o Outcome) float64 { return o.ReqAvg }).Mean
	for _, o := range runs {
		mean.PodsMax = max(mean.PodsMax, o.PodsMax)
		mean.ReqMax = max(mean.ReqMax, o.ReqMax)
	}
	put(sum, key, mean)
	if len(runs) > 1 {
		sum[key+"_within_slo_pct_ci95"] = within.CI95
		sum[key+"_p99_ms_ci95"] = p99.CI95
		sum[key+"_pods_avg_ci95"] = pods.CI95
		sum[key+"_pods_max_mean"] = col(func(o Outcome) float64 { return float64(o.PodsMax) }).Mean
	}
}

// putPaired compares a with b repetition by repetition (the same arrivals
// in both): the mean difference in within-SLO points with its 95 % t
// interval, how many repetitions a was at least as good, and the
// geometric mean of the ratio of their average replicas.
func putPaired(sum map[string]float64, key string, a, b []Outcome) {
	n := min(len(a), len(b))
	if n == 0 {
		return
	}
	d := make([]float64, n)
	logRatio, wins := 0.0, 0
	for i := range n {
		d[i] = a[i].WithinSLOPct - b[i].WithinSLOPct
		if d[i] >= 0 {
			wins++
		}
		if a[i].PodsAvg > 0 && b[i].PodsAvg > 0 {
			logRatio += math.Log(a[i].PodsAvg / b[i].PodsAvg)
		}
	}
	st := report.MeanCI(d)
	sum[key+"_within_slo_pp"] = st.Mean
	sum[key+"_within_slo_pp_ci95"] = st.CI95
	sum[key+"_within_slo_pp_ci95_lo"] = st.Mean - st.CI95
	sum[key+"_within_slo_reps_won"] = float64(wins)
	sum[key+"_pods_avg_ratio"] = math.Exp(logRatio / float64(n))
}

// pooled is two functions' outcomes as one: shares weighted by requests,
// replicas summed.
func pooled(a, b Outcome) Outcome {
	n := a.Requests + b.Requests
	w := func(x, y float64) float64 {
		if n == 0 {
			return 0
		}
		return (x*float64(a.Requests) + y*float64(b.Requests)) / float64(n)
	}
	o := Outcome{Requests: n, WithinSLOPct: w(a.WithinSLOPct, b.WithinSLOPct), Pct503: w(a.Pct503, b.Pct503), ErrPct: w(a.ErrPct, b.ErrPct),
		PodsAvg: a.PodsAvg + b.PodsAvg, PodsMax: a.PodsMax + b.PodsMax, ReqAvg: a.ReqAvg + b.ReqAvg, ReqMax: a.ReqMax + b.ReqMax}
	o.Lat = append(append([]float64(nil), a.Lat...), b.Lat...)
	sort.Float64s(o.Lat)
	if len(o.Lat) > 0 {
		var t float64
		for _, v := range o.Lat {
			t += v
		}
		o.MeanMs, o.P50Ms, o.P99Ms = t/float64(len(o.Lat)), quant(o.Lat, 0.5), quant(o.Lat, 0.99)
	}
	return o
}

// initialScale is what every policy starts a trace with when runs start
// warm: the replicas the opening rate needs at a replica's capacity.
func initialScale(cfg Config, rates []float64, cc, holdMs int) int {
	if cfg.WarmSeconds <= 0 {
		return 0
	}
	return InitialReplicas(rates, float64(cc)*1000/float64(holdMs))
}

// meanExecMs is the mean of the ET_avg samples (ms) the queue proxies
// reported over the runs, 0 when none did.
func meanExecMs(ss []*series) float64 {
	var sum float64
	var n int
	for _, s := range ss {
		if s == nil {
			continue
		}
		for _, e := range s.ExecMs {
			if e > 0 {
				sum += e
				n++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
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
