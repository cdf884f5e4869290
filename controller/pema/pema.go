// Package pema is PEMA (Hossen et al., HPDC '22): an SLO-driven
// allocator that starts from ample CPU and cuts it step by step while the
// app's p95 end-to-end latency stays under the SLO, rolling back through
// its history (RHDb) when the SLO breaks. It is pure: no goroutines, no
// I/O but the RHDb it is given, no clock; randomness comes from a seeded
// source, so a recorded trace replays exactly. docs/pema.md has our
// readings of the paper.
package pema

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Config holds PEMA's parameters. Defaults (DefaultConfig) are the paper's
// where it gives one.
type Config struct {
	SLO   float64 // R_SLO: the p95 target in seconds
	Alpha float64 // α of Eqs 3/4: smaller cuts more aggressively (§4.3 sweeps use 0.5)
	Beta  float64 // β of Eq 4: the largest relative cut in one step (§4.3: 0.3)
	// A, B: exploration probability p_e = A·s + B (Eq 8). §4.1: high
	// exploration A=0.1, B=0.01; low A=0.05, B=0.005.
	A, B float64
	// K: Eqs 10/11 average r over the last K intervals (Fig 14: K=5).
	K int
	// Buffer scales R in Eqs 3/4/8 (§3.3: "for instance, to 95%"); 1 = off.
	Buffer float64
	// U0, H0: initial bottleneck thresholds (§3.3: 15 % and zero).
	U0, H0 float64
	// MinCPU: no service is cut below this many cores (a CFS quota under
	// ~1 ms per period is unusable; ours).
	MinCPU float64
	// Budget: Ω in cores; Σx never exceeds it (0: no budget).
	Budget float64
	// UpdateFirst applies Eqs 6/7 before the filter as Alg. 1 orders the
	// lines; false (our reading) filters against the previous step's
	// thresholds. docs/pema.md: with UpdateFirst the filter excludes nothing.
	UpdateFirst bool
	// Guard: the pema-guarded policy's additions (guard.go); nil: PEMA as
	// the paper.
	Guard *GuardConfig
}

// DefaultConfig returns the paper's parameters for an SLO in seconds.
func DefaultConfig(slo float64) Config {
	return Config{SLO: slo, Alpha: 0.5, Beta: 0.3, A: 0.05, B: 0.005, K: 5, Buffer: 0.95,
		U0: 0.15, H0: 0, MinCPU: 0.05}
}

// Validate rejects parameters outside the paper's domains.
func (c Config) Validate() error {
	switch {
	case !(c.SLO > 0) || c.SLO > 3600:
		return fmt.Errorf("pema: slo %v s: want > 0", c.SLO)
	case !(c.Alpha > 0) || c.Alpha > 1:
		return fmt.Errorf("pema: alpha %v: want 0 < α <= 1", c.Alpha)
	case !(c.Beta > 0) || c.Beta >= 1:
		return fmt.Errorf("pema: beta %v: want 0 < β < 1", c.Beta)
	case !(c.B >= 0) || c.B > c.A || c.A+c.B > 1:
		return fmt.Errorf("pema: exploration A=%v B=%v: want 0 <= B <= A and A+B <= 1 (Eq 8)", c.A, c.B)
	case c.K < 1 || c.K > 1000:
		return fmt.Errorf("pema: K=%d: want 1..1000", c.K)
	case !(c.Buffer > 0) || c.Buffer > 1:
		return fmt.Errorf("pema: buffer %v: want 0 < buffer <= 1", c.Buffer)
	case !(c.U0 > 0) || c.U0 > 1 || !(c.H0 >= 0):
		return fmt.Errorf("pema: thresholds U0=%v H0=%v: want 0 < U0 <= 1, H0 >= 0", c.U0, c.H0)
	case !(c.MinCPU > 0):
		return errors.New("pema: min cpu: want > 0")
	case !(c.Budget >= 0):
		return errors.New("pema: budget: want >= 0")
	}
	if c.Guard != nil {
		return c.Guard.Validate()
	}
	return nil
}

// Obs is what one interval measured, under the allocation then in force
// (Alg. 1 line 2: r^{t−1}, u^{t−1}, h^{t−1}).
type Obs struct {
	P95 float64   // end-to-end p95 latency, seconds
	RPS float64   // request rate λ
	U   []float64 // per service: CPU used / CPU allocated over the interval
	H   []float64 // per service: CPU throttling (fraction of periods throttled)
	// Raised: per service, the share of periods in which Escra's rule
	// raised the quota above PEMA's (pema-guarded; nil: none).
	Raised []float64
}

// Kind says what a step did.
type Kind string

const (
	KindCut      Kind = "cut"      // lines 7–10
	KindHold     Kind = "hold"     // nothing to cut (n=0 or I* empty)
	KindRollback Kind = "rollback" // line 4
	KindExplore  Kind = "explore"  // line 6
	KindSwitch   Kind = "switch"   // workload ranges: another range's allocation
	KindLearn    Kind = "learn"    // Eq 9: allocation held while m is fitted
)

// Step is one step's outcome.
type Step struct {
	T       int       // the step's index in its instance
	Kind    Kind      //
	X       []float64 // the allocation to apply, cores per service
	S       float64   // min((R−r̄)/(αR), 1) before clamping at 0
	N       int       // nᵗ (Eqs 3/10)
	Delta   float64   // Δᵗ (Eqs 4/11), a fraction
	Cut     []int     // services cut
	PE      float64   // p_e (Eq 8)
	Target  float64   // R used in Eqs 3/4/8 (after Eq 9 and the buffer)
	Range   int       // workload range id (Manager only)
	Violate bool      // r^{t−1} > R_SLO
}

// Instance is one PEMA process (one workload range).
type Instance struct {
	cfg   Config
	rng   *rand.Rand
	db    RHDb
	x     []float64
	x0    []float64
	uth   []float64
	hth   []float64
	rs    []float64 // recent r, newest last, at most K
	t     int
	stall int // consecutive steps without a cut
	g     *guardState
}

// NewInstance starts PEMA from the ample allocation x0 (§3.1: "we start
// with sufficient resource for all microservices").
func NewInstance(cfg Config, x0 []float64, db RHDb, seed uint64) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(x0) == 0 {
		return nil, errors.New("pema: no services")
	}
	for i, v := range x0 {
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("pema: x0[%d]=%v: want > 0", i, v)
		}
	}
	if db == nil {
		db = NewMemDB()
	}
	in := &Instance{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), db: db,
		x: fitBudget(clone(x0), cfg.MinCPU, cfg.Budget), x0: clone(x0), uth: fill(len(x0), cfg.U0), hth: fill(len(x0), cfg.H0)}
	if cfg.Guard != nil {
		in.g = newGuardState(len(x0))
	}
	return in, nil
}

// X is the current allocation.
func (in *Instance) X() []float64 { return clone(in.x) }

// Thresholds returns Uᵗʰ and Hᵗʰ.
func (in *Instance) Thresholds() (u, h []float64) { return clone(in.uth), clone(in.hth) }

// DB is the instance's RHDb.
func (in *Instance) DB() RHDb { return in.db }

// Stalled is how many consecutive steps took no cut.
func (in *Instance) Stalled() int { return in.stall }

// SetBudget changes Ω; the allocation is scaled down to fit.
func (in *Instance) SetBudget(omega float64) {
	in.cfg.Budget = omega
	in.x = fitBudget(in.x, in.cfg.MinCPU, omega)
}

// SetSLO changes R_SLO (Fig 20); the history stays.
func (in *Instance) SetSLO(slo float64) error {
	c := in.cfg
	c.SLO = slo
	if err := c.Validate(); err != nil {
		return err
	}
	in.cfg = c
	return nil
}

// ScoreS is min((R − r̄)/(αR), 1) (Eqs 3/4/10/11), not clamped below.
func ScoreS(R, rbar, alpha float64) float64 {
	return math.Min((R-rbar)/(alpha*R), 1)
}

// NCut is nᵗ = ⌈N·s⌉ for s clamped to [0, 1] (Eqs 3/10; the ceiling is
// our reading: the paper's N·s is not an integer).
func NCut(N int, s float64) int {
	s = math.Max(0, math.Min(s, 1))
	return min(N, int(math.Ceil(float64(N)*s-1e-9)))
}

// DeltaCut is Δᵗ = β·s as a fraction (Eqs 4/11), s clamped to [0, 1].
func DeltaCut(beta, s float64) float64 { return beta * math.Max(0, math.Min(s, 1)) }

// PExplore is p_e = A·s + B (Eq 8), s clamped to [0, 1].
func PExplore(A, B, s float64) float64 { return A*math.Max(0, math.Min(s, 1)) + B }

// InclusionP is Eq 5 over the candidates: pᵢ = 1 − (uᵢ* − min u*)/(1 − min u*)
// with uᵢ* = uᵢ/Uᵢᵗʰ, clamped to [0, 1]. A zero or negative denominator
// (the least utilised candidate is at or above its threshold) gives p = 1
// to the least utilised and 0 to the rest (the intent §3.3 states).
func InclusionP(u, uth []float64, cand []int) map[int]float64 {
	p := make(map[int]float64, len(cand))
	if len(cand) == 0 {
		return p
	}
	us := make(map[int]float64, len(cand))
	lo := math.Inf(1)
	for _, i := range cand {
		v := u[i] / uth[i]
		if math.IsNaN(v) {
			v = 0
		}
		us[i] = v
		lo = math.Min(lo, v)
	}
	den := 1 - lo
	for _, i := range cand {
		switch {
		case den <= 0:
			// Eq 5 is undefined; the least utilised still get 1 (the
			// paper's stated intent), the rest 0.
			if us[i] <= lo {
				p[i] = 1
			} else {
				p[i] = 0
			}
		default:
			p[i] = math.Max(0, math.Min(1, 1-(us[i]-lo)/den))
		}
	}
	return p
}

// Step runs Alg. 1 once with R_SLO as the target.
func (in *Instance) Step(o Obs) (Step, error) { return in.StepTarget(o, in.cfg.SLO) }

// StepTarget runs Alg. 1 once. R is the latency target of Eqs 3/4/8 (Eq 9
// makes it depend on the load); violations are judged against R_SLO.
func (in *Instance) StepTarget(o Obs, R float64) (Step, error) {
	N := len(in.x)
	if len(o.U) != N || len(o.H) != N {
		return Step{}, fmt.Errorf("pema: %d services, observation has %d/%d", N, len(o.U), len(o.H))
	}
	if math.IsNaN(o.P95) || o.P95 < 0 || math.IsNaN(o.RPS) || o.RPS < 0 || !(R > 0) {
		return Step{}, fmt.Errorf("pema: bad observation p95=%v rps=%v target=%v", o.P95, o.RPS, R)
	}
	u, h := sane(o.U), sane(o.H)
	violate := o.P95 > in.cfg.SLO
	// Line 3: the allocation that produced r^{t−1}, with the thresholds
	// (and, guarded, the utilisation the fit needs).
	e := Entry{T: in.t, X: clone(in.x), R: o.P95, RPS: o.RPS, Uth: clone(in.uth), Hth: clone(in.hth), Violate: violate}
	if in.g != nil {
		e.U = clone(u)
	}
	if err := in.db.Append(e); err != nil {
		return Step{}, fmt.Errorf("pema: rhdb: %w", err)
	}
	in.rs = append(in.rs, o.P95)
	if len(in.rs) > in.cfg.K {
		in.rs = in.rs[len(in.rs)-in.cfg.K:]
	}
	st := Step{T: in.t, Violate: violate}
	in.t++
	Rb := R * in.cfg.Buffer
	st.Target = Rb
	st.S = ScoreS(Rb, mean(in.rs), in.cfg.Alpha)
	// Line 4: roll back on the instantaneous r (§3.5), to the entry with
	// the least total CPU that did not violate.
	if violate && in.g != nil {
		in.stall++
		in.guardRollback(o.P95)
		st.Kind, st.X = KindRollback, clone(in.x)
		return st, nil
	}
	if in.g != nil {
		in.g.cutIdx, in.g.cutFrom = nil, nil
	}
	if violate {
		in.stall++
		in.lineFour() // nothing in the history safe: back to the ample start
		st.Kind, st.X = KindRollback, clone(in.x)
		return st, nil
	}
	oldU, oldH := clone(in.uth), clone(in.hth)
	// Line 5: Eqs 6/7.
	for i := range N {
		in.uth[i] = math.Max(in.uth[i], u[i])
		in.hth[i] = math.Max(in.hth[i], h[i])
	}
	fu, fh := oldU, oldH
	if in.cfg.UpdateFirst {
		fu, fh = in.uth, in.hth
	}
	if in.g != nil {
		if st.Cut = in.undoRaised(o.Raised); len(st.Cut) > 0 {
			in.stall++
			st.Kind, st.X = KindUndo, clone(in.x)
			return st, nil
		}
	}
	// Line 6: exploration (Eq 8, with r̄: our reading).
	st.PE = PExplore(in.cfg.A, in.cfg.B, st.S)
	if in.rng.Float64() < st.PE {
		if es := in.okEntries(); len(es) > 0 {
			e := es[in.rng.IntN(len(es))]
			in.x = fitBudget(clone(e.X), in.cfg.MinCPU, in.cfg.Budget)
			in.stall++
			st.Kind, st.X = KindExplore, clone(in.x)
			return st, nil
		}
	}
	// Line 7: Eqs 3/4 (10/11 with K > 1).
	st.N, st.Delta = NCut(N, st.S), DeltaCut(in.cfg.Beta, st.S)
	// Line 8: services not throttled beyond their threshold.
	var cand []int
	for i := range N {
		if h[i] <= fh[i] {
			cand = append(cand, i)
		}
	}
	if in.g != nil && in.cfg.Guard.Fit {
		// Mechanism 3 in place of lines 9–10.
		if st.N > 0 && st.Delta > 0 {
			from := clone(in.x)
			st.Cut = in.fitCuts(cand, st.N, st.Delta, R)
			in.noteCut(st.Cut, from)
		}
		return in.finish(st), nil
	}
	// Line 9: Eq 5.
	p := InclusionP(u, fu, cand)
	var star []int
	for _, i := range cand {
		if in.rng.Float64() < p[i] {
			star = append(star, i)
		}
	}
	// Line 10: at most nᵗ of them, uniformly; x·(1 − Δ) (our reading of x·Δ).
	if len(star) > st.N {
		in.rng.Shuffle(len(star), func(a, b int) { star[a], star[b] = star[b], star[a] })
		star = star[:st.N]
		slices.Sort(star)
	}
	if st.N == 0 || st.Delta <= 0 {
		star = nil
	}
	from := clone(in.x)
	for _, i := range star {
		nx := math.Max(in.cfg.MinCPU, in.x[i]*(1-st.Delta))
		if in.g != nil {
			nx = in.guardNext(i, in.x[i], st.Delta)
		}
		if nx < in.x[i] {
			in.x[i] = nx
			st.Cut = append(st.Cut, i)
		}
	}
	if in.g != nil {
		in.noteCut(st.Cut, from)
	}
	return in.finish(st), nil
}

// finish sets the step's kind from its cuts.
func (in *Instance) finish(st Step) Step {
	if len(st.Cut) == 0 {
		in.stall++
		st.Kind = KindHold
	} else {
		in.stall = 0
		st.Kind = KindCut
	}
	st.X = clone(in.x)
	return st
}

// noteCut remembers the cut in force for the guard's blame.
func (in *Instance) noteCut(cut []int, from []float64) {
	in.g.cutIdx, in.g.cutFrom = slices.Clone(cut), from
}

// minEntry is the non-violating entry with the least Σx (the latest among
// equals): Alg. 1 line 4, "minimum resource and no SLO violation".
func (in *Instance) minEntry() (Entry, bool) {
	es := in.okEntries()
	if len(es) == 0 {
		return Entry{}, false
	}
	best := es[0]
	for _, e := range es[1:] {
		if sum(e.X) <= sum(best.X) {
			best = e
		}
	}
	return best, true
}

func (in *Instance) okEntries() []Entry {
	all, err := in.db.Entries()
	if err != nil {
		return nil
	}
	// Judged against the SLO in force now, not when recorded: after the
	// SLO is tightened (Fig 20) an entry that met the old one may not.
	viol := func(e Entry) bool { return e.Violate || e.R > in.cfg.SLO }
	// An allocation measured more than once is judged by its record: it
	// is "without SLO violation" only while its violations are fewer than
	// its clean intervals (docs/pema.md, reading 4).
	score := map[string]int{}
	for _, e := range all {
		if len(e.X) != len(in.x) {
			continue
		}
		if viol(e) {
			score[allocKey(e.X)]--
		} else {
			score[allocKey(e.X)]++
		}
	}
	// An allocation that gives no service more than one judged bad would
	// violate too (§3.2's monotonicity), however lucky it once was. The
	// ample start is exempt from being the judge: §3.1 assumes it meets
	// the SLO, and a noisy interval there must not condemn every cut.
	x0 := allocKey(in.x0)
	var bad [][]float64
	seen := map[string]bool{}
	for _, e := range all {
		k := allocKey(e.X)
		if len(e.X) == len(in.x) && score[k] <= 0 && k != x0 && !seen[k] {
			seen[k] = true
			bad = append(bad, e.X)
		}
	}
	var out []Entry
	for _, e := range all {
		if !viol(e) && len(e.X) == len(in.x) && score[allocKey(e.X)] > 0 && !dominated(e.X, bad) {
			out = append(out, e)
		}
	}
	return out
}

// dominated: x gives no service more than some allocation in bad.
func dominated(x []float64, bad [][]float64) bool {
	for _, b := range bad {
		le := true
		for i := range x {
			if x[i] > b[i]+1e-9 {
				le = false
				break
			}
		}
		if le {
			return true
		}
	}
	return false
}

// allocKey identifies an allocation (to the µs of a 100 ms period).
func allocKey(x []float64) string {
	b := make([]byte, 0, 8*len(x))
	for _, v := range x {
		b = strconv.AppendInt(b, int64(math.Round(v*1e5)), 36)
		b = append(b, ',')
	}
	return string(b)
}

func fitBudget(x []float64, floor, omega float64) []float64 {
	if omega > 0 {
		floor = math.Min(floor, omega/float64(len(x)))
	}
	for i := range x {
		x[i] = math.Max(x[i], floor)
	}
	if omega <= 0 {
		return x
	}
	tot := sum(x)
	if tot <= omega {
		return x
	}
	above := tot - floor*float64(len(x))
	k := (omega - floor*float64(len(x))) / above
	for i := range x {
		x[i] = floor + (x[i]-floor)*k*(1-1e-12)
	}
	return x
}

func sane(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		if !math.IsNaN(x) && x > 0 && !math.IsInf(x, 0) {
			out[i] = x
		}
	}
	return out
}

func clone(v []float64) []float64 { return append([]float64(nil), v...) }

func fill(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return sum(v) / float64(len(v))
}
