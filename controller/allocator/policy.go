package allocator

import "math"

// CPUInput is what a policy sees when one period's statistic arrives.
type CPUInput struct {
	P             Params
	QuotaUs       int64   // C(i)_q[t], the quota the controller assigned
	UnusedUs      int64   // C(i)_q[t] − C(i)_u[t] of this period
	Throttled     bool    // C(i)_th[t]
	AvgThrottle   float64 // Σ_{t−n..t} th / n
	AvgUnusedUs   float64 // Σ_{t−n..t} (q − u) / n
	PeakUsedUs    int64   // max_{t−n..t} u: the most used in one period
	UnallocatedUs int64   // Ω − Σ_λ quotas
	Members       int     // λ
}

// OOMInput is what a policy sees for an OOM request.
type OOMInput struct {
	P              Params
	LimitBytes     int64
	UsageBytes     int64
	WantBytes      int64 // what the blocked allocation needs, if known
	Unallocated    int64
	OtherReclaimOK bool
}

// Policy decides per-app; the App clamps every answer to the invariants
// (Σ ≤ Ω, floor ≤ quota ≤ host max, grants ≤ pool), so a policy cannot
// break them. Later policies (PEMA, recommenders) implement this.
type Policy interface {
	Name() string
	// NextQuota proposes C(i)_q[t+1]; return in.QuotaUs for no change.
	NextQuota(in CPUInput) (int64, Reason)
	// OOMStep proposes how many bytes to add to the limit.
	OOMStep(in OOMInput) int64
}

// Escra is seed 000 §IV-D as read in docs/allocator.md.
type Escra struct{}

func (Escra) Name() string { return "escra" }

// NextQuota, §IV-D-1:
//
//	throttled in t:  q' = q + avgTh · Υ · U/λ           (capped by U later)
//	unused > γ·q in t and on average over the window:
//	                 q' = max(q − κ · min(avgUnused, unused[t]),
//	                          (1 + headroom) · peak usage in the window)
//
// U/λ is one fair share of the unallocated pool; Υ fair shares at a
// throttle rate of 1. Using min(avg, last) never cuts below last period's
// usage: q − κ(q−u) ≥ u. The headroom floor (ours, docs/allocator.md) keeps
// a member whose usage swings period to period above its recent peak:
// without it the quota saws between the pool and the trough, and every
// tooth is a throttled period.
func (Escra) NextQuota(in CPUInput) (int64, Reason) {
	q := in.QuotaUs
	if in.Throttled {
		lambda := max(in.Members, 1)
		d := in.AvgThrottle * in.P.Upsilon * float64(in.UnallocatedUs) / float64(lambda)
		return q + int64(math.Ceil(d)), ReasonThrottled
	}
	g := in.P.Gamma * float64(q)
	if float64(in.UnusedUs) > g && in.AvgUnusedUs > g {
		d := in.P.Kappa * min(in.AvgUnusedUs, float64(in.UnusedUs))
		next := q - int64(d)
		if in.P.Headroom > 0 {
			next = max(next, int64(math.Ceil((1+in.P.Headroom)*float64(in.PeakUsedUs))))
		}
		if next < q {
			return next, ReasonUnused
		}
	}
	return q, ""
}

// OOMStep is the paper's fixed number of pages, or what the allocation
// needs when that is more.
func (Escra) OOMStep(in OOMInput) int64 { return max(in.P.OOMStepBytes, in.WantBytes) }
