package pema

import (
	"errors"
	"fmt"
	"math"
)

// RangeConfig is §3.4's workload-aware PEMA: one instance per range of
// request rates, only the one holding the current load acting
// ("pseudo-parallel").
type RangeConfig struct {
	// Bounds are the initial range edges in requests per second, e.g.
	// [0, 200, 400]: two ranges. Below the first or above the last edge
	// the outermost range acts. Nil: one range for every load.
	Bounds []float64
	// TargetWidth: split a range in halves until it is at most this wide
	// (TrainTicket: 25 rps). 0: never split.
	TargetWidth float64
	// SplitAfter: split a range once its instance took no cut for this
	// many consecutive steps (the paper does not say when; reading 6 in
	// docs/pema.md).
	SplitAfter int
	// LearnSteps: Eq 9's m is fitted by linear regression of p95 on the
	// load over the first LearnSteps intervals, with the allocation held.
	// 0: m = M.
	LearnSteps int
	M          float64 // m when LearnSteps is 0, seconds per rps
}

// Range is one workload range and its PEMA.
type Range struct {
	ID     int
	Lo, Hi float64
	Parent int // -1 for an initial range
	Inst   *Instance
}

// Manager runs PEMA over workload ranges with Eq 9's dynamic target.
type Manager struct {
	cfg    Config
	rc     RangeConfig
	newDB  func(id int) (RHDb, error)
	seed   uint64
	ranges []*Range
	active int // index into ranges
	m      float64
	learnX []float64
	learnY []float64
	learnt bool
}

// NewManager starts one instance per initial range, all at x0. newDB
// makes each range's RHDb (nil: in memory).
func NewManager(cfg Config, rc RangeConfig, x0 []float64, newDB func(id int) (RHDb, error), seed uint64) (*Manager, error) {
	if newDB == nil {
		newDB = func(int) (RHDb, error) { return NewMemDB(), nil }
	}
	b := rc.Bounds
	if len(b) == 0 {
		b = []float64{0, math.Inf(1)}
	}
	if len(b) < 2 {
		return nil, errors.New("pema: range bounds: want at least two edges")
	}
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) || b[i-1] < 0 {
			return nil, fmt.Errorf("pema: range bounds %v: want increasing, >= 0", b)
		}
	}
	if rc.TargetWidth < 0 || rc.SplitAfter < 0 || rc.LearnSteps < 0 || math.IsNaN(rc.M) {
		return nil, errors.New("pema: range config: negative width, split or learn steps")
	}
	if rc.SplitAfter == 0 {
		rc.SplitAfter = 3
	}
	mg := &Manager{cfg: cfg, rc: rc, newDB: newDB, seed: seed, m: rc.M, learnt: rc.LearnSteps == 0}
	for i := 1; i < len(b); i++ {
		db, err := newDB(i - 1)
		if err != nil {
			return nil, err
		}
		in, err := NewInstance(cfg, x0, db, seed+uint64(i-1))
		if err != nil {
			return nil, err
		}
		mg.ranges = append(mg.ranges, &Range{ID: i - 1, Lo: b[i-1], Hi: b[i], Parent: -1, Inst: in})
	}
	return mg, nil
}

// Ranges lists the ranges, in creation order.
func (mg *Manager) Ranges() []Range {
	out := make([]Range, len(mg.ranges))
	for i, r := range mg.ranges {
		out[i] = *r
	}
	return out
}

// Active is the acting range.
func (mg *Manager) Active() Range { return *mg.ranges[mg.active] }

// M is Eq 9's slope (seconds per rps).
func (mg *Manager) M() float64 { return mg.m }

// Target is Eq 9: R(λ) = m·(λ − λmax) + R_SLO, never below a tenth of
// the SLO (a steep fitted m must not ask for the impossible).
func Target(m, lambda, lambdaMax, slo float64) float64 {
	if math.IsInf(lambdaMax, 0) {
		return slo
	}
	return math.Max(m*(lambda-lambdaMax)+slo, 0.1*slo)
}

// SetSLO changes R_SLO of every range (Fig 20).
func (mg *Manager) SetSLO(slo float64) error {
	for _, r := range mg.ranges {
		if err := r.Inst.SetSLO(slo); err != nil {
			return err
		}
	}
	mg.cfg.SLO = slo
	return nil
}

// SetBudget changes Ω for every range.
func (mg *Manager) SetBudget(omega float64) {
	mg.cfg.Budget = omega
	for _, r := range mg.ranges {
		r.Inst.SetBudget(omega)
	}
}

func (mg *Manager) find(lambda float64) int {
	best, bestLo := -1, math.Inf(1)
	var top, bottom int
	for i, r := range mg.ranges {
		if lambda >= r.Lo && lambda < r.Hi {
			// Splits leave the parent covering only its upper half, so
			// the narrowest hit is the one.
			if best < 0 || r.Hi-r.Lo < mg.ranges[best].Hi-mg.ranges[best].Lo {
				best = i
			}
		}
		if r.Hi > mg.ranges[top].Hi {
			top = i
		}
		if r.Lo < bestLo {
			bestLo, bottom = r.Lo, i
		}
	}
	if best >= 0 {
		return best
	}
	if lambda < bestLo {
		return bottom
	}
	return top
}

// Step feeds one interval to the range that was acting during it, or
// switches to the range of the new load.
func (mg *Manager) Step(o Obs) (Step, error) {
	if !mg.learnt {
		cur := mg.ranges[mg.active]
		if math.IsNaN(o.P95) || math.IsNaN(o.RPS) {
			return Step{}, errors.New("pema: bad observation")
		}
		mg.learnX = append(mg.learnX, o.RPS)
		mg.learnY = append(mg.learnY, o.P95)
		if len(mg.learnX) >= mg.rc.LearnSteps {
			mg.m = math.Max(0, Slope(mg.learnX, mg.learnY))
			mg.learnt = true
		}
		return Step{Kind: KindLearn, X: cur.Inst.X(), Range: cur.ID, Target: mg.cfg.SLO,
			Violate: o.P95 > mg.cfg.SLO}, nil
	}
	j := mg.find(o.RPS)
	if j != mg.active {
		mg.active = j
		r := mg.ranges[j]
		return Step{Kind: KindSwitch, X: r.Inst.X(), Range: r.ID, Violate: o.P95 > mg.cfg.SLO}, nil
	}
	r := mg.ranges[j]
	st, err := r.Inst.StepTarget(o, Target(mg.m, o.RPS, r.Hi, mg.cfg.SLO))
	if err != nil {
		return st, err
	}
	st.Range = r.ID
	if err := mg.maybeSplit(r); err != nil {
		return st, err
	}
	return st, nil
}

// maybeSplit halves r once its PEMA stalled: the parent keeps the upper
// half, a new PEMA takes the lower half from the parent's allocation,
// thresholds and history (§3.4).
func (mg *Manager) maybeSplit(r *Range) error {
	w := r.Hi - r.Lo
	if mg.rc.TargetWidth <= 0 || math.IsInf(w, 0) || w/2 < mg.rc.TargetWidth-1e-9 || r.Inst.Stalled() < mg.rc.SplitAfter {
		return nil
	}
	id := len(mg.ranges)
	db, err := mg.newDB(id)
	if err != nil {
		return err
	}
	if err := copyInto(db, r.Inst.db); err != nil {
		return err
	}
	child, err := NewInstance(r.Inst.cfg, r.Inst.x, db, mg.seed+uint64(id))
	if err != nil {
		return err
	}
	child.uth, child.hth, child.rs = clone(r.Inst.uth), clone(r.Inst.hth), clone(r.Inst.rs)
	child.g = r.Inst.g.clone()
	child.t = r.Inst.t
	mid := (r.Lo + r.Hi) / 2
	mg.ranges = append(mg.ranges, &Range{ID: id, Lo: r.Lo, Hi: mid, Parent: r.ID, Inst: child})
	r.Lo = mid
	r.Inst.stall = 0
	return nil
}

// Slope is the least-squares slope of y on x (0 when x does not vary).
func Slope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 || len(x) != len(y) {
		return 0
	}
	mx, my := mean(x), mean(y)
	var sxy, sxx float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	if sxx <= 1e-12*n {
		return 0
	}
	return sxy / sxx
}

// Violation passes a violation seen inside an interval (pema-guarded) to
// the range of the load now: another range's allocation if the load has
// left the acting one (§3.4's switch, at once), else the acting range's
// rollback.
func (mg *Manager) Violation(p95, rps float64) (Step, error) {
	cur := mg.ranges[mg.active]
	if !mg.learnt {
		return Step{Kind: KindLearn, X: cur.Inst.X(), Range: cur.ID, Violate: true}, nil
	}
	if j := mg.find(rps); j != mg.active {
		mg.active = j
		r := mg.ranges[j]
		return Step{Kind: KindSwitch, X: r.Inst.X(), Range: r.ID, Violate: true}, nil
	}
	st, err := cur.Inst.Violation(p95, rps)
	st.Range = cur.ID
	return st, err
}
