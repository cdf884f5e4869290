// Package allocator is the resource allocator of Escra §IV-D: per-app
// CPU quota decisions from per-period telemetry (§IV-D-1) and memory grants
// on OOM requests with reclaim (§IV-C, §IV-D-2). It is pure and
// deterministic: no goroutines, no I/O, no clock of its own. The controller
// feeds it events in order (one goroutine per app) and carries out the
// decisions it returns; Replay feeds it a recorded trace.
package allocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Params are the tunables of one app's allocator. Defaults follow the Escra paper.
type Params struct {
	// Window is n, the number of periods in the sliding windows (§IV-D-1).
	Window int `json:"window" yaml:"window"`
	// Upsilon is Υ: how many fair shares of the unallocated pool a
	// container that was throttled in every period of the window may take.
	Upsilon float64 `json:"upsilon" yaml:"upsilon"`
	// Gamma is γ as a fraction of the quota: scale down only when unused
	// runtime exceeds γ·quota.
	Gamma float64 `json:"gamma" yaml:"gamma"`
	// Kappa is κ: the fraction of the unused runtime taken away.
	Kappa float64 `json:"kappa" yaml:"kappa"`
	// Period is the CFS period quotas are decided for.
	Period time.Duration `json:"period" yaml:"period"`
	// CPUFloorUs is the smallest quota (µs per period) a member is cut to.
	CPUFloorUs int64 `json:"cpu_floor_us" yaml:"cpu_floor_us"`
	// Headroom: a scale-down never goes below (1 + Headroom) × the most
	// the member used in one period of the window. Ours, not the paper's;
	// 0 turns the floor off: the Escra paper's rule exactly.
	Headroom float64 `json:"headroom" yaml:"headroom"`
	// PeakHalfLife: the escra policy's scale-down keeps the quota above a
	// peak usage that decays with this half-life (0: the window's peak
	// only). Ours.
	PeakHalfLife time.Duration `json:"peak_half_life" yaml:"peak_half_life"`
	// MinStepUs: a telemetry-driven quota change smaller than this is not
	// sent (a cgroup write and an RPC for a few µs buy nothing).
	MinStepUs int64 `json:"min_step_us" yaml:"min_step_us"`
	// OOMStepBytes is the fixed grant per OOM request (§IV-D-2).
	OOMStepBytes int64 `json:"oom_step_bytes" yaml:"oom_step_bytes"`
	// SafeMarginBytes is δ of the reclaim rule limit → usage + δ (§IV-C).
	SafeMarginBytes int64 `json:"safe_margin_bytes" yaml:"safe_margin_bytes"`
	// LeaseFraction is the share of the unallocated CPU lent to hosts as
	// host-local leases every period (0: no leases), by apps
	// whose policy reacts inside a period (escra). Ours; docs/host-credit.md,
	// "Host-local leases".
	LeaseFraction float64 `json:"lease_fraction" yaml:"lease_fraction"`
	// MemCreditFraction is the share of the unassigned memory lent to
	// hosts as host-local memory credit every period (0: none), by the
	// same apps as LeaseFraction: escrad then answers an OOM from it with
	// no round trip. Ours (Escra §IV-D-2 always asks the controller);
	// docs/host-credit.md, "Host-local memory credit".
	MemCreditFraction float64 `json:"mem_credit_fraction" yaml:"mem_credit_fraction"`
	// FairShareOnThrottle: a member throttled below its equal share Ω/λ
	// whose raise the pool cannot cover takes the rest from members above
	// Ω/λ (Books.Throttle; escra policy only). Ours.
	FairShareOnThrottle bool `json:"fair_share_on_throttle" yaml:"fair_share_on_throttle"`
	// HostMaxShare caps what the members of one host may hold together, as
	// a fraction of the app's Ω and memory budget (hostshare.go; 0 or 1: no
	// cap). A host that lies about its containers then takes at most this
	// much from the app's other hosts. Ours.
	HostMaxShare float64 `json:"host_max_share,omitempty" yaml:"host_max_share,omitempty"`
	// ReleasePeriods: a member throttled with a raise the pool cannot
	// cover takes quota from siblings whose usage of their last
	// ReleasePeriods periods fell below their quota (release.go; escra
	// policy only; 0: off). Ours.
	ReleasePeriods int `json:"release_periods" yaml:"release_periods"`
}

const MiB = 1 << 20

// DefaultParams: κ = 0.8, γ = 0.2, Υ = 20, δ = 50 MiB and a 100 ms period
// are the paper's; n = 10 (one second of history), a 2 ms floor (0.02
// core; 5 ms until the benchmark showed it was most of a quiet container's
// slack, docs/allocator.md), a 10 % headroom over the window's peak usage, a 100 µs minimum
// step, a 64 MiB OOM step and a release after 2 quiet periods
// (release.go) are ours (the paper gives no values).
func DefaultParams() Params {
	return Params{
		Window:          10,
		Upsilon:         20,
		Gamma:           0.2,
		Kappa:           0.8,
		Period:          100 * time.Millisecond,
		CPUFloorUs:      2000,
		Headroom:        0.1,
		MinStepUs:       100,
		OOMStepBytes:    64 * MiB,
		SafeMarginBytes: 50 * MiB,

		FairShareOnThrottle: true,
		ReleasePeriods:      2,
		LeaseFraction:       0.5,
		// Half the unassigned memory, as for CPU: the controller keeps
		// the other half for joins, reclaim-less grants to hosts whose
		// credit ran out and FillPending, and a credit is only a number
		// until used (revoked at once when a join or an OOM request needs
		// the pool). Less would leave a host of a small app without one
		// OOM step of credit (1 GiB free, 4 hosts, 0.25: 64 MiB each);
		// the rebalance refills what a host used every period.
		MemCreditFraction: 0.5,
	}
}

// UnmarshalJSON starts from DefaultParams, so a field the sender did not
// know of gets its default rather than its zero: a whole Params from an
// older escractl, or an app stored before fair_share_on_throttle existed,
// would otherwise decode with that option off. Every field is marshalled,
// so a round trip is exact.
func (p *Params) UnmarshalJSON(b []byte) error {
	type plain Params // without this method
	d := plain(DefaultParams())
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	*p = Params(d)
	return nil
}

// PeriodUs is the period in microseconds.
func (p Params) PeriodUs() int64 { return p.Period.Microseconds() }

// Validate rejects parameters that would make the allocator unsound.
func (p Params) Validate() error {
	switch {
	case p.Window < 1 || p.Window > 10000:
		return fmt.Errorf("window n=%d: want 1..10000", p.Window)
	case !(p.Upsilon > 0) || p.Upsilon > 1e6:
		return fmt.Errorf("upsilon %v: want > 0", p.Upsilon)
	case !(p.Gamma >= 0) || p.Gamma >= 1:
		return fmt.Errorf("gamma %v: want 0 <= gamma < 1 (a fraction of the quota)", p.Gamma)
	case !(p.Kappa > 0) || p.Kappa > 1:
		return fmt.Errorf("kappa %v: want 0 < kappa <= 1", p.Kappa)
	case p.Period < time.Millisecond || p.Period > time.Second:
		return fmt.Errorf("period %v: want 1ms..1s (CFS limits)", p.Period)
	case p.CPUFloorUs < 1000 || p.CPUFloorUs > p.PeriodUs():
		return fmt.Errorf("cpu floor %dus: want 1000us..period (CFS minimum quota is 1ms)", p.CPUFloorUs)
	case !(p.Headroom >= 0) || p.Headroom > 10:
		return fmt.Errorf("headroom %v: want 0..10 (a fraction of the peak usage)", p.Headroom)
	case p.PeakHalfLife < 0 || p.PeakHalfLife > time.Hour:
		return fmt.Errorf("peak half-life %v: want 0..1h", p.PeakHalfLife)
	case p.MinStepUs < 0 || p.MinStepUs > p.PeriodUs():
		return fmt.Errorf("min step %dus: want 0..period", p.MinStepUs)
	case p.OOMStepBytes < 4096:
		return errors.New("oom step: want at least one page")
	case p.SafeMarginBytes < 0:
		return errors.New("safe margin: want >= 0")
	case p.ReleasePeriods < 0 || p.ReleasePeriods > 10000:
		return fmt.Errorf("release periods %d: want 0..10000 (more than the window counts as the window)", p.ReleasePeriods)
	case !(p.LeaseFraction >= 0) || p.LeaseFraction > 1:
		return fmt.Errorf("lease fraction %v: want 0..1", p.LeaseFraction)
	case !(p.MemCreditFraction >= 0) || p.MemCreditFraction > 1:
		return fmt.Errorf("memory credit fraction %v: want 0..1", p.MemCreditFraction)
	case !(p.HostMaxShare >= 0) || p.HostMaxShare > 1:
		return fmt.Errorf("host max share %v: want 0..1 (0 or 1: no cap)", p.HostMaxShare)
	}
	return nil
}
