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
	LimitChangesPerS, ControllerCPUPct, DaemonCPUPct   Stat
	Errors                                             Stat // failed requests (errors, timeouts, non-2xx/3xx)
	// HasClient is false for workloads without a client (memwave): their
	// latency and throughput are not figures.
	HasClient bool
	// Pooled slack samples of every repetition, for the CDFs.
	CPUSlack, MemSlack []float64
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
		add("oom", float64(run.OOMKills))
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
		g.LimitChangesPerS, g.ControllerCPUPct, g.DaemonCPUPct = stat(a.m["lcps"]), stat(a.m["ctl"]), stat(a.m["dmn"])
		g.Errors = stat(a.m["err"])
	}
	return out
}

// IsEscra tells Escra's policies (escra, escra-kernel, ...) from the baselines.
func IsEscra(policy string) bool { return strings.HasPrefix(policy, "escra") }

// Delta is the change of one Escra policy against one baseline in one cell,
// signed so that positive means Escra is better (seed 000 Table I):
//
//	latency:    (base − escra)/base · 100   (latency reduction)
//	throughput: (escra − base)/base · 100   (throughput increase)
//	slack:      (base − escra)/base · 100   (slack reduction)
type Delta struct {
	Cell
	Escra, Baseline                     string
	HasClient                           bool // latency and throughput are meaningful
	P999Latency, P99Latency, Throughput float64
	CPUSlackP50, CPUSlackP99            float64
	MemSlackP50, MemSlackP99            float64
}

// Noise floors of the baselines' figures: below them a percentage says
// nothing (a 0.002-core slack turns a 0.2-core one into −10,000 %), so that
// cell has no delta (NaN) and is left out of the Table I means.
const (
	floorLatencyUs  = 1
	floorThroughput = 1e-9
	floorCPUSlack   = 0.01 // cores
	floorMemSlack   = 1    // MiB
)

// reduction is (base − escra)/|base| · 100, NaN when |base| < floor.
func reduction(base, escra, floor float64) float64 {
	if math.Abs(base) < floor || math.IsNaN(base) {
		return math.NaN()
	}
	return (base - escra) / math.Abs(base) * 100
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
				out = append(out, Delta{Cell: c, Escra: e, Baseline: b, HasClient: ea.HasClient && ba.HasClient,
					P999Latency: reduction(ba.P999Us.Mean, ea.P999Us.Mean, floorLatencyUs),
					P99Latency:  reduction(ba.P99Us.Mean, ea.P99Us.Mean, floorLatencyUs),
					Throughput:  -reduction(ba.ThroughputRPS.Mean, ea.ThroughputRPS.Mean, floorThroughput),
					CPUSlackP50: reduction(ba.CPUSlackP50.Mean, ea.CPUSlackP50.Mean, floorCPUSlack),
					CPUSlackP99: reduction(ba.CPUSlackP99.Mean, ea.CPUSlackP99.Mean, floorCPUSlack),
					MemSlackP50: reduction(ba.MemSlackP50.Mean, ea.MemSlackP50.Mean, floorMemSlack),
					MemSlackP99: reduction(ba.MemSlackP99.Mean, ea.MemSlackP99.Mean, floorMemSlack),
				})
			}
		}
	}
	return out
}

// TableRow is one row of the Table I analogue: per column, the mean of
// the Deltas over the cells that have that figure (latency and throughput
// only where there is a client; none below the baseline's noise floor).
type TableRow struct {
	Escra, Baseline string
	Cells           int
	ClientCells     int
	Avg             Delta
	// Left counts the (cell, column) figures left out for the noise floor.
	Left int
}

func TableI(ds []Delta) []TableRow {
	type acc struct {
		sum [7]float64
		n   [7]int
	}
	idx := map[[2]string]int{}
	var rows []TableRow
	var accs []acc
	for _, d := range ds {
		k := [2]string{d.Escra, d.Baseline}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			rows = append(rows, TableRow{Escra: d.Escra, Baseline: d.Baseline})
			accs = append(accs, acc{})
		}
		r, a := &rows[i], &accs[i]
		r.Cells++
		if d.HasClient {
			r.ClientCells++
		}
		for j, v := range d.values() {
			if j < 3 && !d.HasClient {
				continue
			}
			if math.IsNaN(v) {
				r.Left++
				continue
			}
			a.sum[j] += v
			a.n[j]++
		}
	}
	for i := range rows {
		var m [7]float64
		for j := range m {
			m[j] = math.NaN()
			if accs[i].n[j] > 0 {
				m[j] = accs[i].sum[j] / float64(accs[i].n[j])
			}
		}
		a := &rows[i].Avg
		a.P999Latency, a.P99Latency, a.Throughput = m[0], m[1], m[2]
		a.CPUSlackP50, a.CPUSlackP99, a.MemSlackP50, a.MemSlackP99 = m[3], m[4], m[5], m[6]
	}
	return rows
}

// values lists the seven figures in table order.
func (d Delta) values() [7]float64 {
	return [7]float64{d.P999Latency, d.P99Latency, d.Throughput, d.CPUSlackP50, d.CPUSlackP99, d.MemSlackP50, d.MemSlackP99}
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
