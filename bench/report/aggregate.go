package report

import (
	"math"
	"sort"
	"strings"
)

// Cell is one (workload, load) pair; Key one (workload, load, policy).
type Cell struct{ Workload, Load string }
type Key struct {
	Cell
	Policy string
}

// Stat is a mean over repetitions with the half-width of its 95 %
// confidence interval (Student t; 0 with one repetition).
type Stat struct {
	Mean, CI95 float64
	N          int
}

// Agg holds the per-key figures, each a Stat over repetitions.
type Agg struct {
	P50Us, P99Us, P999Us, ThroughputRPS                Stat
	CPUSlackP50, CPUSlackP99, MemSlackP50, MemSlackP99 Stat
	ThrottledPeriods, ThrottledFrac, OOMKills          Stat
	ThrottledMs                                        Stat
	LimitChangesPerS, ControllerCPUPct, DaemonCPUPct   Stat
	Errors                                             Stat // failed requests (errors, timeouts, non-2xx/3xx)
	// Fairness figures (see Run): CPU held for the app, CPU the batch
	// container got, and how busy the client's CPUs were.
	ReservedCores, BatchCores, ClientCPUCores, ClientSelfCores Stat
	// Runs is the number of repetitions of this key.
	Runs int
	// HasClient is false for workloads without a client (memwave): their
	// latency and throughput are not figures.
	HasClient bool
	// Pooled slack samples of every repetition, for the CDFs.
	CPUSlack, MemSlack []float64
	// samples holds each figure's per-repetition values, for the bootstrap.
	samples map[string][]float64
}

// Percentile of unsorted xs (nearest rank); 0 for none.
func Percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// tCrit95 is the two-sided 95 % Student t quantile for n−1 degrees of freedom.
func tCrit95(n int) float64 {
	t := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}
	if df := n - 1; df >= 1 && df < len(t) {
		return t[df]
	}
	return 1.96
}

func stat(xs []float64) Stat {
	n := len(xs)
	if n == 0 {
		return Stat{}
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n == 1 {
		return Stat{Mean: mean, N: 1}
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return Stat{Mean: mean, CI95: tCrit95(n) * sd / math.Sqrt(float64(n)), N: n}
}

// Aggregate groups runs by key.
func Aggregate(r *Results) map[Key]*Agg {
	type acc struct{ m map[string][]float64 }
	raw := map[Key]*acc{}
	out := map[Key]*Agg{}
	for _, run := range r.Runs {
		k := Key{Cell{run.Workload, run.Load}, run.Policy}
		a := raw[k]
		if a == nil {
			a = &acc{m: map[string][]float64{}}
			raw[k] = a
			out[k] = &Agg{}
		}
		var cpu, mem []float64
		for _, s := range run.Slack {
			cpu = append(cpu, s.CPUCores)
			mem = append(mem, s.MemMiB)
		}
		out[k].Runs++
		out[k].HasClient = out[k].HasClient || run.Client.Requests > 0
		out[k].CPUSlack = append(out[k].CPUSlack, cpu...)
		out[k].MemSlack = append(out[k].MemSlack, mem...)
		add := func(name string, v float64) { a.m[name] = append(a.m[name], v) }
		add("p50", run.Client.P50Us)
		add("p99", run.Client.P99Us)
		add("p999", run.Client.P999Us)
		add("tput", run.Client.ThroughputRPS)
		add("err", float64(run.Client.Requests-run.Client.Successes))
		add("cpu50", Percentile(cpu, 0.5))
		add("cpu99", Percentile(cpu, 0.99))
		add("mem50", Percentile(mem, 0.5))
		add("mem99", Percentile(mem, 0.99))
		add("thr", float64(run.ThrottledPeriods))
		frac := 0.0
		if run.Periods > 0 {
			frac = float64(run.ThrottledPeriods) / float64(run.Periods)
		}
		add("thrfrac", frac)
		add("thrms", run.ThrottledMs)
		add("oom", float64(run.OOMKills))
		add("reserved", run.ReservedCores)
		add("batch", run.BatchCores)
		add("clientcpu", run.ClientCPUCores)
		add("clientself", run.ClientSelfCores)
		d := run.DurationS
		if d <= 0 {
			d = run.Client.DurationS
		}
		if d > 0 {
			add("lcps", float64(run.LimitChanges)/d)
			add("ctl", 100*run.ControllerCPUSeconds/d)
			add("dmn", 100*run.DaemonCPUSeconds/d)
		}
	}
	for k, a := range raw {
		g := out[k]
		g.P50Us, g.P99Us, g.P999Us, g.ThroughputRPS = stat(a.m["p50"]), stat(a.m["p99"]), stat(a.m["p999"]), stat(a.m["tput"])
		g.CPUSlackP50, g.CPUSlackP99 = stat(a.m["cpu50"]), stat(a.m["cpu99"])
		g.MemSlackP50, g.MemSlackP99 = stat(a.m["mem50"]), stat(a.m["mem99"])
		g.ThrottledPeriods, g.ThrottledFrac, g.OOMKills = stat(a.m["thr"]), stat(a.m["thrfrac"]), stat(a.m["oom"])
		g.ThrottledMs = stat(a.m["thrms"])
		g.LimitChangesPerS, g.ControllerCPUPct, g.DaemonCPUPct = stat(a.m["lcps"]), stat(a.m["ctl"]), stat(a.m["dmn"])
		g.Errors = stat(a.m["err"])
		g.ReservedCores, g.BatchCores = stat(a.m["reserved"]), stat(a.m["batch"])
		g.ClientCPUCores, g.ClientSelfCores = stat(a.m["clientcpu"]), stat(a.m["clientself"])
		g.samples = a.m
	}
	return out
}

// BatchCoresMean is, per policy, the mean over cells of the batch
// container's mean cores: what the capacity a policy leaves free buys.
func BatchCoresMean(aggs map[Key]*Agg) map[string]float64 {
	sum, n := map[string]float64{}, map[string]int{}
	for k, a := range aggs {
		sum[k.Policy] += a.BatchCores.Mean
		n[k.Policy]++
	}
	for p := range sum {
		sum[p] /= float64(n[p])
	}
	return sum
}

// IsEscra tells Escra's policies (escra, escra-kernel, ...) from the baselines.
func IsEscra(policy string) bool { return strings.HasPrefix(policy, "escra") }

// Delta is the change of one Escra policy against one baseline in one cell,
// signed so that positive means Escra is better (the Escra paper's Table I):
//
//	latency:    (base − escra)/base · 100   (latency reduction)
//	throughput: (escra − base)/base · 100   (throughput increase)
//	slack:      (base − escra)/base · 100   (slack reduction)
//
// A percentage is NaN only where the baseline's figure is zero (|base| <
// pctEpsilon); Diff is defined everywhere.
type Delta struct {
	Cell
	Escra, Baseline                     string
	HasClient                           bool // latency and throughput are meaningful
	P999Latency, P99Latency, Throughput float64
	CPUSlackP50, CPUSlackP99            float64
	MemSlackP50, MemSlackP99            float64
	// Diff is escra − baseline per figure (table order) in the figure's
	// unit: where a baseline is ~0 the percentage says nothing, this does.
	Diff [NumMetrics]float64
	// Lo and Hi bound the 95 % percentile-bootstrap interval of each
	// percentage; NaN without one (see bootstrapCell).
	Lo, Hi [NumMetrics]float64
	// The two sides' aggregates, for Table I's bootstrap.
	e, b *Agg
}

// Metric is one compared figure, in table order.
type Metric struct {
	Name   string // summary key part
	Unit   string // of Diff, as in summary keys
	Label  string // for the report
	raw    string // Agg.samples key
	Higher bool   // higher is better (throughput)
	Client bool   // only meaningful with a client
}

const NumMetrics = 7

var Metrics = [NumMetrics]Metric{
	{"p999_latency", "us", "p99.9 latency", "p999", false, true},
	{"p99_latency", "us", "p99 latency", "p99", false, true},
	{"throughput", "rps", "throughput", "tput", true, true},
	{"cpu_slack_p50", "cores", "p50 CPU slack", "cpu50", false, false},
	{"cpu_slack_p99", "cores", "p99 CPU slack", "cpu99", false, false},
	{"mem_slack_p50", "mib", "p50 mem slack", "mem50", false, false},
	{"mem_slack_p99", "mib", "p99 mem slack", "mem99", false, false},
}

// pctEpsilon: a baseline figure this close to zero has no percentage
// (division by ~0), only an absolute difference. No other floor: small
// baselines give large percentages, and the geometric mean of ratios
// beside the arithmetic mean shows how much they weigh.
const pctEpsilon = 1e-12

// pct is the signed percentage change, positive = Escra better.
func (m Metric) pct(base, escra float64) float64 {
	if math.IsNaN(base) || math.Abs(base) < pctEpsilon {
		return math.NaN()
	}
	if m.Higher {
		return (escra - base) / math.Abs(base) * 100
	}
	return (base - escra) / math.Abs(base) * 100
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Deltas compares every Escra policy with every baseline in every cell
// where both ran, in a stable order.
func Deltas(aggs map[Key]*Agg) []Delta {
	var out []Delta
	for _, c := range Cells(aggs) {
		for _, e := range Policies(aggs) {
			ea := aggs[Key{c, e}]
			if !IsEscra(e) || ea == nil {
				continue
			}
			for _, b := range Policies(aggs) {
				ba := aggs[Key{c, b}]
				if IsEscra(b) || ba == nil {
					continue
				}
				d := Delta{Cell: c, Escra: e, Baseline: b, HasClient: ea.HasClient && ba.HasClient, e: ea, b: ba}
				var v [NumMetrics]float64
				for i, m := range Metrics {
					es, bs := ea.samples[m.raw], ba.samples[m.raw]
					em, bm := mean(es), mean(bs)
					v[i] = m.pct(bm, em)
					d.Diff[i] = em - bm
					d.Lo[i], d.Hi[i] = bootstrapCell(m, es, bs, seedFor(c.Workload, c.Load, e, b, m.Name))
				}
				d.setValues(v)
				out = append(out, d)
			}
		}
	}
	return out
}

// TableRow is one row of the Table I analogue. Per figure: Avg holds the
// arithmetic mean over cells of the percentages (every cell whose baseline
// is not zero), its bootstrap CI (Avg.Lo, Avg.Hi) and the mean Diff over
// every cell; latency and throughput only count cells with a client.
type TableRow struct {
	Escra, Baseline string
	Cells           int
	ClientCells     int
	Avg             Delta
	// N counts the cells in each percentage mean; Undefined those with a
	// zero baseline (no percentage, their Diff still counts).
	N, Undefined [NumMetrics]int
	// GeoMean is the geometric mean over cells of escra/baseline (< 1
	// better for latency and slack, > 1 for throughput); GeoExcluded
	// counts cells where the ratio is undefined or not positive, left out
	// of the geometric mean only.
	GeoMean     [NumMetrics]float64
	GeoExcluded [NumMetrics]int
}

// TableI averages the Deltas per (Escra policy, baseline).
func TableI(ds []Delta) []TableRow {
	idx := map[[2]string]int{}
	var rows []TableRow
	var members [][]Delta
	for _, d := range ds {
		k := [2]string{d.Escra, d.Baseline}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, TableRow{Escra: d.Escra, Baseline: d.Baseline})
			members = append(members, nil)
		}
		rows[i].Cells++
		if d.HasClient {
			rows[i].ClientCells++
		}
		members[i] = append(members[i], d)
	}
	for i := range rows {
		r := &rows[i]
		var avg [NumMetrics]float64
		for j, m := range Metrics {
			var cells []Delta
			for _, d := range members[i] {
				if !m.Client || d.HasClient {
					cells = append(cells, d)
				}
			}
			sum, diff, logs := 0.0, 0.0, 0.0
			var geoN int
			for _, d := range cells {
				diff += d.Diff[j]
				if v := d.values()[j]; math.IsNaN(v) {
					r.Undefined[j]++
				} else {
					sum += v
					r.N[j]++
				}
				if e, b := d.means(j); e > 0 && b > 0 {
					logs += math.Log(e / b)
					geoN++
				} else {
					r.GeoExcluded[j]++
				}
			}
			avg[j], r.Avg.Diff[j], r.GeoMean[j] = math.NaN(), math.NaN(), math.NaN()
			if r.N[j] > 0 {
				avg[j] = sum / float64(r.N[j])
			}
			if len(cells) > 0 {
				r.Avg.Diff[j] = diff / float64(len(cells))
			}
			if geoN > 0 {
				r.GeoMean[j] = math.Exp(logs / float64(geoN))
			}
			r.Avg.Lo[j], r.Avg.Hi[j] = bootstrapMean(m, j, cells, seedFor(r.Escra, r.Baseline, m.Name))
		}
		r.Avg.setValues(avg)
	}
	return rows
}

// means are the escra and baseline means of figure j (NaN without aggregates).
func (d Delta) means(j int) (escra, base float64) {
	if d.e == nil || d.b == nil {
		return math.NaN(), math.NaN()
	}
	return mean(d.e.samples[Metrics[j].raw]), mean(d.b.samples[Metrics[j].raw])
}

// values lists the seven figures in table order.
func (d Delta) values() [NumMetrics]float64 {
	return [NumMetrics]float64{d.P999Latency, d.P99Latency, d.Throughput, d.CPUSlackP50, d.CPUSlackP99, d.MemSlackP50, d.MemSlackP99}
}

func (d *Delta) setValues(v [NumMetrics]float64) {
	d.P999Latency, d.P99Latency, d.Throughput = v[0], v[1], v[2]
	d.CPUSlackP50, d.CPUSlackP99, d.MemSlackP50, d.MemSlackP99 = v[3], v[4], v[5], v[6]
}

// policyOrder puts Escra first, then Static from most to least generous,
// then the recommenders.
func policyRank(p string) int {
	for i, q := range []string{"escra", "escra-kernel", "static15", "static10", "static075", "autopilot", "vpa10", "vpa60"} {
		if p == q {
			return i
		}
	}
	if IsEscra(p) {
		return 1
	}
	return 100
}

// Policies lists the policies present, in report order.
func Policies(aggs map[Key]*Agg) []string {
	seen := map[string]bool{}
	var ps []string
	for k := range aggs {
		if !seen[k.Policy] {
			seen[k.Policy] = true
			ps = append(ps, k.Policy)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		ri, rj := policyRank(ps[i]), policyRank(ps[j])
		if ri != rj {
			return ri < rj
		}
		return ps[i] < ps[j]
	})
	return ps
}

var loadRank = map[string]int{"fixed": 0, "exp": 1, "burst": 2, "trace": 3}

// Cells lists the (workload, load) pairs present, sorted.
func Cells(aggs map[Key]*Agg) []Cell {
	seen := map[Cell]bool{}
	var cs []Cell
	for k := range aggs {
		if !seen[k.Cell] {
			seen[k.Cell] = true
			cs = append(cs, k.Cell)
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Workload != cs[j].Workload {
			return cs[i].Workload < cs[j].Workload
		}
		ri, ok1 := loadRank[cs[i].Load]
		rj, ok2 := loadRank[cs[j].Load]
		if !ok1 {
			ri = 10
		}
		if !ok2 {
			rj = 10
		}
		if ri != rj {
			return ri < rj
		}
		return cs[i].Load < cs[j].Load
	})
	return cs
}

// MeanCI is xs's mean with the half-width of its 95 % Student t interval
// (0 for fewer than two values); other benchmarks' repetitions use it.
func MeanCI(xs []float64) Stat { return stat(xs) }
