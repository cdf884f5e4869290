package allocator

import "sync"

// Targets is the "pema" policy's per-period half: PEMA (
// controller/pema) decides every 15–30 s from the app's latency, far
// slower than the 100 ms period, so its loop (controller/pemaloop) sets a
// target quota per member here and NextQuota returns it. Meanwhile it
// sums each member's usage and throttled periods for the loop's next
// step (the u and h of Alg. 1 line 2). There is no reaction inside a
// period and no usage-driven change: PEMA alone moves CPU. Memory keeps
// Escra's OOM rescue (the paper's PEMA is CPU only).
//
// The "pema-guarded" policy (NewGuardedTargets) differs in one thing: a
// member that PEMA set a target for and that runs out of quota in the
// middle of a period is raised at once by Escra's rule (Escra.OnThrottle:
// max(q, U/λ) from the app's unassigned budget) for the rest of that
// period; the next period starts at the target again. Usage.Raised counts
// those periods: the PEMA layer reads them as a cut too deep.
type Targets struct {
	guarded bool
	mu      sync.Mutex
	target  map[Key]int64
	acc     map[Key]Usage
}

// Usage is one member's CPU over the periods since the last Take.
type Usage struct {
	Periods, Throttled int
	UsedUs, QuotaUs    int64 // Σ runtime used, Σ quota in force
	Raised             int   // periods raised by Escra's rule (pema-guarded)
}

// NewTargets returns a Targets policy without targets: until the loop
// sets one, members keep their quota.
func NewTargets() *Targets { return &Targets{target: map[Key]int64{}, acc: map[Key]Usage{}} }

// NewGuardedTargets returns the pema-guarded policy's Targets.
func NewGuardedTargets() *Targets { t := NewTargets(); t.guarded = true; return t }

func (t *Targets) Name() string {
	if t.guarded {
		return PolicyPEMAGuarded
	}
	return PolicyPEMA
}

// Guarded: Escra's in-period rule is on (pema-guarded).
func (t *Targets) Guarded() bool { return t.guarded }

func (t *Targets) NextQuota(in CPUInput) (int64, Reason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.acc[in.Key]
	a.Periods++
	if in.Throttled {
		a.Throttled++
	}
	if in.RaisedInPeriod {
		a.Raised++
	}
	a.QuotaUs += in.QuotaUs
	a.UsedUs += max(0, in.QuotaUs-in.UnusedUs)
	t.acc[in.Key] = a
	if q, ok := t.target[in.Key]; ok && q > 0 {
		return q, ReasonSLO
	}
	return in.QuotaUs, ""
}

// OnThrottle: no change inside a period, the period's record counts it;
// pema-guarded raises a member PEMA cut by Escra's rule.
func (t *Targets) OnThrottle(in CPUInput) (int64, Reason) {
	if !t.guarded {
		return in.QuotaUs, ""
	}
	t.mu.Lock()
	_, cut := t.target[in.Key]
	t.mu.Unlock()
	if !cut {
		return in.QuotaUs, ""
	}
	return Escra{}.OnThrottle(in)
}

func (*Targets) OOMStep(in OOMInput) int64 { return paperOOMStep(in) }

// Set replaces the targets (µs per period); members not named lose theirs.
func (t *Targets) Set(q map[Key]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.target = make(map[Key]int64, len(q))
	for k, v := range q {
		t.target[k] = v
	}
}

// Take returns and resets the usage sums.
func (t *Targets) Take() map[Key]Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.acc
	t.acc = map[Key]Usage{}
	return out
}
