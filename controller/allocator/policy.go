package allocator

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// CPUInput is what a policy sees when one period's statistic arrives, or
// when a throttle event arrives in the middle of a period.
type CPUInput struct {
	Key           Key // the member (policies that keep per-member state)
	P             Params
	QuotaUs       int64   // C(i)_q[t], the quota the controller assigned
	UnusedUs      int64   // C(i)_q[t] − C(i)_u[t] of this period (0 mid-period)
	Throttled     bool    // C(i)_th[t]
	AvgThrottle   float64 // Σ_{t−n..t} th / n
	AvgUnusedUs   float64 // Σ_{t−n..t} (q − u) / n
	PeakUsedUs    int64   // max_{t−n..t} u: the most used in one period
	DecayedPeakUs int64   // the largest usage seen, halved every P.PeakHalfLife
	UnallocatedUs int64   // Ω − Σ_λ quotas
	Members       int     // λ
	// RaisedInPeriod: a throttle event already raised the quota during
	// the period this statistic reports.
	RaisedInPeriod bool
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

// Policy decides per-app; the Books clamp every answer to the invariants
// (Σ ≤ Ω, floor ≤ quota ≤ host max, grants ≤ pool), so a policy cannot
// break them.
type Policy interface {
	Name() string
	// NextQuota proposes C(i)_q[t+1] at the end of period t; return
	// in.QuotaUs for no change.
	NextQuota(in CPUInput) (int64, Reason)
	// OnThrottle proposes a quota when the daemon reports that the
	// container ran out of quota in the middle of a period (the throttle
	// event). A raise takes effect at once: the kernel refills the runtime
	// and unthrottles the group when the quota is written.
	OnThrottle(in CPUInput) (int64, Reason)
	// OOMStep proposes how many bytes to add to the limit.
	OOMStep(in OOMInput) int64
}

// Policy names, as the spec's `allocator.policy` and the admin API take them.
const (
	PolicyEscra      = "escra"
	PolicyEscraPaper = "escra-paper"
	PolicyPEMA       = "pema"
	// PolicyPEMAGuarded is pema with Escra's in-period rule left on and the
	// PEMA layer guarded (controller/pema, docs/pema-guarded.md).
	PolicyPEMAGuarded = "pema-guarded"
)

var policies = map[string]func() Policy{
	PolicyEscra:       func() Policy { return Escra{} },
	PolicyEscraPaper:  func() Policy { return EscraPaper{} },
	PolicyPEMA:        func() Policy { return NewTargets() },
	PolicyPEMAGuarded: func() Policy { return NewGuardedTargets() },
}

// PolicyNames lists the known policies, sorted.
func PolicyNames() []string {
	var out []string
	for n := range policies {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PolicyByName returns a policy; "" is the default (escra).
func PolicyByName(name string) (Policy, error) {
	if name == "" {
		name = PolicyEscra
	}
	mk, ok := policies[name]
	if !ok {
		return nil, fmt.Errorf("%q is not a known policy (known: %s)", name, strings.Join(PolicyNames(), ", "))
	}
	return mk(), nil
}

// EscraPaper is Escra §IV-D exactly, as read in docs/allocator.md: no
// headroom floor, no history, no reaction inside a period.
//
//	throttled in t:  q' = q + avgTh · Υ · U/λ           (capped by U later)
//	unused > γ·q in t and on average over the window:
//	                 q' = q − κ · min(avgUnused, unused[t])
//
// U/λ is one fair share of the unallocated pool; Υ fair shares at a
// throttle rate of 1. Using min(avg, last) never cuts below last period's
// usage: q − κ(q−u) ≥ u.
type EscraPaper struct{}

func (EscraPaper) Name() string { return PolicyEscraPaper }

func (EscraPaper) NextQuota(in CPUInput) (int64, Reason) { return paperStep(in, 0, 0) }

// OnThrottle: the paper decides once per period.
func (EscraPaper) OnThrottle(in CPUInput) (int64, Reason) { return in.QuotaUs, "" }

func (EscraPaper) OOMStep(in OOMInput) int64 { return paperOOMStep(in) }

// paperStep is §IV-D-1 with an optional floor under a scale-down.
func paperStep(in CPUInput, headroom float64, peakUs int64) (int64, Reason) {
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
		if headroom > 0 {
			next = max(next, int64(math.Ceil((1+headroom)*float64(peakUs))))
		}
		if next < q {
			return next, ReasonUnused
		}
	}
	return q, ""
}

// paperOOMStep is the paper's fixed number of pages, or what the
// allocation needs when that is more.
func paperOOMStep(in OOMInput) int64 { return max(in.P.OOMStepBytes, in.WantBytes) }

// Escra is the default policy: the Escra paper's rules plus what the benchmark
// showed they lack (docs/escra-policy.md):
//   - a scale-down never goes below (1 + headroom) × the larger of the
//     window's peak usage and a peak that decays with half-life
//     P.PeakHalfLife, so a container whose usage swings keeps its recent
//     peak instead of sawing between the pool and the trough;
//   - a throttle event in the middle of a period raises the quota at once
//     (double it, or one fair share U/λ of the pool if more), instead of
//     leaving the container throttled for the rest of the period; the
//     period's own throttle flag then does not scale up a second time
//     (the event already answered it; a throttle after the raise sends
//     another event).
type Escra struct{}

func (Escra) Name() string { return PolicyEscra }

func (Escra) NextQuota(in CPUInput) (int64, Reason) {
	if in.Throttled && in.RaisedInPeriod {
		return in.QuotaUs, ""
	}
	return paperStep(in, in.P.Headroom, max(in.PeakUsedUs, in.DecayedPeakUs))
}

// OnThrottle: q' = q + max(q, U/λ); Books caps the raise at U. One fair
// share, not Υ of them: several members throttled at the start of the
// same burst each get a share instead of the first taking the pool.
func (Escra) OnThrottle(in CPUInput) (int64, Reason) {
	lambda := max(in.Members, 1)
	d := max(float64(in.QuotaUs), math.Ceil(float64(in.UnallocatedUs)/float64(lambda)))
	return in.QuotaUs + int64(d), ReasonThrottleEvent
}

func (Escra) OOMStep(in OOMInput) int64 { return paperOOMStep(in) }

// ReactsInPeriod: the escra policy raises inside a period, so its apps may
// lend host-local leases (lease.go).
func (Escra) ReactsInPeriod() bool { return true }
