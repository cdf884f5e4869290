package replay

import (
	"fmt"
	"math"

	"github.com/escra-dev/escra/controller/allocator"
)

// Model is the fluid model of one app: every container's CPU demand per
// 100 ms period (cores, from a profiling run without limits), the cpuset
// the app's containers share (AppCores) and the CFS period.
//
// Per period and container: want = demand + backlog; served = min(want,
// limit), and Σ served ≤ AppCores (shared out in proportion when the
// cpuset binds); what is not served waits (backlog) and is served first
// next period. Nothing is lost: the model has no timeouts.
type Model struct {
	Demand   [][]float64 // [container][period] cores
	AppCores float64
}

// Result is one policy's figures on one cell.
type Result struct {
	Policy string `json:"policy"`
	// ReservedCores is what the policy reserves: Σ limits (static) or the
	// app budget (Escra).
	ReservedCores float64 `json:"reserved_cores"`
	// ThrottledShare is the share of container-periods in which the
	// limit bound (demand plus backlog above the quota).
	ThrottledShare float64 `json:"throttled_share"`
	// WaitingCoreS is Σ over periods and containers of the work carried
	// into the next period (core-seconds): demand that waited a period.
	WaitingCoreS float64 `json:"waiting_core_s"`
	// MaxBacklogS is the longest any container's backlog would take to
	// serve at its limit (seconds): a bound on the extra delay.
	MaxBacklogS float64 `json:"max_backlog_s"`
	// QuotaCores is the mean Σ quotas (for Escra below the budget when
	// the pool holds some back).
	QuotaCores float64 `json:"quota_cores"`
	// PeakServedCores is the most the app's containers were served
	// together in one period. For a static policy it is the oracle
	// budget: an allocator that knew every period's demand would serve
	// every container exactly as this policy does with that budget, so
	// PeakServedCores ÷ ReservedCores is the least share of the static
	// reservation that moving budget between containers alone can match
	// it with, period by period (Escra §VI-C's claim, at its limit).
	PeakServedCores float64 `json:"peak_served_cores"`
}

const periodUs = 100000

func (m Model) periods() int {
	n := -1
	for _, d := range m.Demand {
		if n < 0 || len(d) < n {
			n = len(d)
		}
	}
	return max(n, 0)
}

// tally accumulates one policy's figures.
type tally struct {
	r            Result
	periods, thr int
	backlg       []float64
}

func newTally(name string, n int) *tally {
	return &tally{r: Result{Policy: name}, backlg: make([]float64, n)}
}

// period closes one period: Σ served of the app's containers (µs).
func (t *tally) period(served []float64) {
	sum := 0.0
	for _, s := range served {
		sum += s
	}
	t.r.PeakServedCores = max(t.r.PeakServedCores, sum/periodUs)
}

func (t *tally) step(i int, want, served, limitUs float64, throttled bool) {
	t.periods++
	if throttled {
		t.thr++
	}
	b := want - served
	t.backlg[i] = b
	t.r.WaitingCoreS += b / 1e6
	if limitUs > 0 {
		t.r.MaxBacklogS = max(t.r.MaxBacklogS, b/limitUs*0.1)
	}
}

func (t *tally) done(n int, quotaUs float64) Result {
	if t.periods > 0 {
		t.r.ThrottledShare = float64(t.thr) / float64(t.periods)
	}
	if n > 0 {
		t.r.QuotaCores = quotaUs / float64(n) / periodUs
	}
	return t.r
}

// shareCPU scales served amounts down so Σ ≤ the cpuset's capacity.
func (m Model) shareCPU(served []float64) {
	capUs := m.AppCores * periodUs
	sum := 0.0
	for _, s := range served {
		sum += s
	}
	if m.AppCores > 0 && sum > capUs {
		for i := range served {
			served[i] *= capUs / sum
		}
	}
}

// Static runs fixed limits (cores per container).
func (m Model) Static(name string, limits []float64) (Result, error) {
	if len(limits) != len(m.Demand) {
		return Result{}, fmt.Errorf("replay: %d limits for %d containers", len(limits), len(m.Demand))
	}
	n := m.periods()
	t := newTally(name, len(limits))
	served := make([]float64, len(limits))
	want := make([]float64, len(limits))
	var quota float64
	for _, l := range limits {
		t.r.ReservedCores += l
		quota += l * periodUs
	}
	for p := range n {
		for i, l := range limits {
			want[i] = t.backlg[i] + m.Demand[i][p]*periodUs
			served[i] = min(want[i], l*periodUs)
		}
		m.shareCPU(served)
		t.period(served)
		for i, l := range limits {
			t.step(i, want[i], served[i], l*periodUs, want[i] > l*periodUs+1)
		}
	}
	return t.done(n, quota*float64(n)), nil
}

// EscraOptions set how the allocator is driven.
type EscraOptions struct {
	Params allocator.Params
	Policy allocator.Policy // nil: the escra policy
	// Events: a container whose want reaches 95 % of its quota within a
	// period sends a throttle event, as escrad's near-throttle detection
	// does, seen ReactionFrac of a period after its quota would run out
	// at an even arrival rate.
	Events       bool
	ReactionFrac float64 // 0: 0.02 (2 ms of a 100 ms period)
	// Trace, if set, sees every period: per container the want, what was
	// served and the quota at the period's end (µs).
	Trace func(period int, want, served, quota []float64)
}

// Escra runs the real allocator (controller/allocator.Books) with app
// budget Ω = budget cores, fed as the controller feeds it: per period one
// statistic per container (quota in force, unused runtime, throttled,
// usage) and, with Events, throttle events inside the period.
func (m Model) Escra(name string, budget float64, o EscraOptions) (Result, error) {
	a, err := allocator.NewBooks(name, allocator.Budget{CPUCores: budget, MemoryBytes: 1 << 30}, o.Params, o.Policy)
	if err != nil {
		return Result{}, fmt.Errorf("replay: %w", err)
	}
	hostMax := int64(math.Ceil(m.AppCores * periodUs))
	if m.AppCores <= 0 {
		hostMax = int64(budget * periodUs)
	}
	k := len(m.Demand)
	for i := range k {
		if _, err := a.Join(allocator.Join{Key: allocator.Key(i + 1), HostMaxUs: hostMax}); err != nil {
			return Result{}, fmt.Errorf("replay: join: %w", err)
		}
	}
	react := o.ReactionFrac
	if react <= 0 {
		react = 0.02
	}
	n := m.periods()
	t := newTally(name, k)
	t.r.ReservedCores = budget
	want := make([]float64, k)
	served := make([]float64, k)
	q0 := make([]float64, k)
	limits := make([]float64, k)
	frac := make([]float64, k) // period fraction gone when an event raised the quota (1: none)
	var quotaSum float64
	for p := range n {
		seq := uint64(p + 1)
		for i := range k {
			want[i] = t.backlg[i] + m.Demand[i][p]*periodUs
			q0[i] = float64(a.Member(allocator.Key(i + 1)).QuotaUs)
			frac[i] = 1
		}
		if o.Events {
			for i := range k {
				if want[i] < 0.95*q0[i] || want[i] <= 0 {
					continue
				}
				f := min(1, 0.95*q0[i]/want[i]+react)
				if _, err := a.Throttle(allocator.Key(i+1), seq); err != nil {
					return Result{}, fmt.Errorf("replay: throttle event: %w", err)
				}
				if float64(a.Member(allocator.Key(i+1)).QuotaUs) > q0[i] {
					frac[i] = f
				}
			}
		}
		for i := range k {
			q := float64(a.Member(allocator.Key(i + 1)).QuotaUs)
			limit := q
			switch {
			case frac[i] < 1: // raised: the old quota up to the event, the new one after
				limit = 0.95*q0[i] + q*(1-frac[i])
			case q < q0[i]: // cut by a sibling's event: the smaller quota (conservative)
				limit = q
			}
			served[i] = min(want[i], limit)
			limits[i] = limit
		}
		m.shareCPU(served)
		t.period(served)
		if o.Trace != nil {
			qs := make([]float64, k)
			for i := range k {
				qs[i] = float64(a.Member(allocator.Key(i + 1)).QuotaUs)
			}
			o.Trace(p, want, served, qs)
		}
		for i := range k {
			q := a.Member(allocator.Key(i + 1)).QuotaUs
			quotaSum += float64(q)
			// Throttled when the quota bound, not the cpuset: CFS counts
			// nr_throttled only when a group's runtime runs out.
			th := want[i] > limits[i]+1
			t.step(i, want[i], served[i], float64(q), th)
			st := allocator.Stat{Seq: seq, QuotaUs: q, PeriodUs: periodUs,
				UnusedUs: int64(math.Max(0, float64(q)-served[i])), Throttled: th, UsageUs: int64(served[i])}
			if _, err := a.CPU(allocator.Key(i+1), st); err != nil {
				return Result{}, fmt.Errorf("replay: period %d: %w", p, err)
			}
		}
	}
	return t.done(n, quotaSum), nil
}
