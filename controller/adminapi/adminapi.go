// Package adminapi holds the JSON bodies of the controller's admin API
// (/v1/apps, /v1/containers, /v1/hosts, deploy, stats): one definition that
// controller/server encodes and controller/adminclient decodes, so the two
// cannot drift apart.
package adminapi

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/internal/names"
)

// AppSpec defines a Distributed Container (Escra §IV-A): the body of
// PUT /v1/apps/{name} and an element of an --apps file.
type AppSpec struct {
	Name        string  `json:"name" yaml:"name"`
	CPUCores    float64 `json:"cpu_cores" yaml:"cpu_cores"`       // Ω
	MemoryBytes int64   `json:"memory_bytes" yaml:"memory_bytes"` // global memory limit
	// Sigma is the share of the memory budget withheld from bootstrap for
	// OOM grants, 0 <= σ < 1.
	Sigma  float64           `json:"sigma" yaml:"sigma"`
	Params *allocator.Params `json:"params,omitempty" yaml:"params,omitempty"`
	// ParamsNamed lists the spec's allocator fields (spec.Allocator.Named)
	// that Params carries; the controller keeps its own for the others.
	// Empty with Params set: Params is taken whole (an API caller's).
	ParamsNamed []string `json:"params_named,omitempty" yaml:"params_named,omitempty"`
	// Policy is the allocator policy (allocator.PolicyNames; "" = the
	// controller's default).
	Policy string `json:"policy,omitempty" yaml:"policy,omitempty"`
	// SLO is the latency objective the pema policy needs (PEMA).
	SLO *SLO `json:"slo,omitempty" yaml:"slo,omitempty"`
	// Mode is "enforce" ("" too) or "recommend": decisions are computed
	// and shown but never sent to the daemons (docs/spec.md).
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// Maxima cap the allocator per container template (max_cpu,
	// max_memory): a member is matched by its name (MaxFor).
	Maxima []Max `json:"maxima,omitempty" yaml:"maxima,omitempty"`
	// Spec is the spec the app was applied with, kept to be shown back
	// (escractl get apps -o yaml); the fields above are what takes effect.
	Spec *spec.Doc `json:"spec,omitempty" yaml:"spec,omitempty"`
}

// Max is one container template's caps (0: none).
type Max struct {
	Container   string  `json:"container" yaml:"container"`
	CPUCores    float64 `json:"cpu_cores,omitempty" yaml:"cpu_cores,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty" yaml:"memory_bytes,omitempty"`
}

// Recommending reports whether the app only recommends.
func (s AppSpec) Recommending() bool { return s.Mode == spec.ModeRecommend }

// MaxFor is the caps of the member named name of app: the template whose
// containers the deployer names app-T or app-T-N, or a hand-started
// container named T itself; the longest template that matches wins.
func (s AppSpec) MaxFor(name string) Max {
	var best Max
	for _, m := range s.Maxima {
		if len(m.Container) > len(best.Container) && maxMatches(s.Name, m.Container, name) {
			best = m
		}
	}
	return best
}

func maxMatches(app, tpl, name string) bool {
	if name == tpl || name == app+"-"+tpl {
		return true
	}
	rest, ok := strings.CutPrefix(name, app+"-"+tpl+"-")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// ValidAppName reports whether name can name an app: the one rule of
// internal/names, the same as the spec's and escrad's.
func ValidAppName(name string) bool { return names.ValidApp(name) }

// Validate checks the spec.
func (s AppSpec) Validate() error {
	if err := names.ValidateApp(s.Name); err != nil {
		return err
	}
	if err := (allocator.Budget{CPUCores: s.CPUCores, MemoryBytes: s.MemoryBytes, Sigma: s.Sigma}).Validate(); err != nil {
		return fmt.Errorf("app %s: %w", s.Name, err)
	}
	if s.Params != nil {
		if err := s.Params.Validate(); err != nil {
			return fmt.Errorf("app %s: %w", s.Name, err)
		}
	}
	for _, f := range s.ParamsNamed {
		if _, ok := paramFields[f]; !ok {
			return fmt.Errorf("app %s: params_named: %q is not an allocator field", s.Name, f)
		}
	}
	if s.Policy != "" {
		if _, err := allocator.PolicyByName(s.Policy); err != nil {
			return fmt.Errorf("app %s: policy: %w", s.Name, err)
		}
	}
	if s.Spec != nil && s.Spec.Name != s.Name {
		return fmt.Errorf("app %s: its spec names app %q", s.Name, s.Spec.Name)
	}
	if s.Mode != "" && s.Mode != spec.ModeEnforce && s.Mode != spec.ModeRecommend {
		return fmt.Errorf("app %s: mode %q: want enforce or recommend", s.Name, s.Mode)
	}
	for _, m := range s.Maxima {
		if m.Container == "" || !(m.CPUCores >= 0) || m.CPUCores > 1e5 || m.MemoryBytes < 0 || m.MemoryBytes > 1<<50 ||
			(m.MemoryBytes > 0 && m.MemoryBytes < 4<<20) {
			return fmt.Errorf("app %s: maxima: container %q: want a name, cpu_cores ≥ 0 and memory_bytes 0 or ≥ 4 MiB", s.Name, m.Container)
		}
	}
	if (s.Policy == allocator.PolicyPEMA || s.Policy == allocator.PolicyPEMAGuarded) && s.SLO == nil {
		return fmt.Errorf("app %s: policy %s needs an slo (p95, listen, upstream)", s.Name, s.Policy)
	}
	if s.SLO != nil {
		if err := s.SLO.Validate(); err != nil {
			return fmt.Errorf("app %s: %w", s.Name, err)
		}
	}
	return nil
}

// FromSpec converts a validated spec into the app budget the controller
// takes, with the spec itself so it can be shown back. The allocator
// parameters go along only when the spec has an allocator section;
// otherwise the controller's own (flags) apply.
func FromSpec(a *spec.App) AppSpec {
	d := a.Doc()
	b := AppSpec{Name: a.Name, CPUCores: a.CPU, MemoryBytes: a.MemoryBytes, Sigma: a.Sigma, Spec: &d}
	if a.AllocatorSet {
		al := a.Allocator
		b.Policy = al.Policy
		if len(al.Named) > 0 {
			// From the defaults: parameters the spec has no field for (the
			// minimum step) keep theirs rather than becoming 0.
			p := allocator.DefaultParams()
			p.Window, p.Upsilon, p.Gamma, p.Kappa, p.Period = al.Window, al.Upsilon, al.Gamma, al.Kappa, al.Period
			p.CPUFloorUs = int64(math.Round(al.CPUFloor * float64(al.Period.Microseconds())))
			p.OOMStepBytes, p.SafeMarginBytes = al.OOMStepBytes, al.ReclaimMarginBytes
			p.Headroom = al.Headroom
			b.Params = &p
			b.ParamsNamed = append([]string(nil), al.Named...)
		}
	}
	b.SLO = a.SLO
	if a.Mode == spec.ModeRecommend {
		b.Mode = a.Mode
	}
	for _, c := range a.Containers {
		if c.MaxCPU > 0 || c.MaxBytes > 0 {
			b.Maxima = append(b.Maxima, Max{Container: c.Name, CPUCores: c.MaxCPU, MemoryBytes: c.MaxBytes})
		}
	}
	return b
}

// paramFields copies one spec allocator field from src into dst. The CPU
// floor is a share of the period in the spec: EffectiveParams rescales it.
var paramFields = map[string]func(dst *allocator.Params, src allocator.Params){
	"kappa":          func(d *allocator.Params, s allocator.Params) { d.Kappa = s.Kappa },
	"gamma":          func(d *allocator.Params, s allocator.Params) { d.Gamma = s.Gamma },
	"upsilon":        func(d *allocator.Params, s allocator.Params) { d.Upsilon = s.Upsilon },
	"window":         func(d *allocator.Params, s allocator.Params) { d.Window = s.Window },
	"period":         func(d *allocator.Params, s allocator.Params) { d.Period = s.Period },
	"reclaim_margin": func(d *allocator.Params, s allocator.Params) { d.SafeMarginBytes = s.SafeMarginBytes },
	"oom_step":       func(d *allocator.Params, s allocator.Params) { d.OOMStepBytes = s.OOMStepBytes },
	"headroom":       func(d *allocator.Params, s allocator.Params) { d.Headroom = s.Headroom },
	"cpu_floor":      func(d *allocator.Params, s allocator.Params) { d.CPUFloorUs = s.CPUFloorUs },
}

// EffectiveParams is what the app runs with on a controller whose own
// parameters are base: base itself without Params, Params whole without
// ParamsNamed, else base with the named fields taken from Params.
func (s AppSpec) EffectiveParams(base allocator.Params) allocator.Params {
	switch {
	case s.Params == nil:
		return base
	case s.ParamsNamed == nil:
		return *s.Params
	}
	p := base
	for _, f := range s.ParamsNamed {
		if set := paramFields[f]; set != nil {
			set(&p, *s.Params)
		}
	}
	// A floor named without a period is the same share of base's period.
	if sp, pp := s.Params.PeriodUs(), p.PeriodUs(); slices.Contains(s.ParamsNamed, "cpu_floor") && sp > 0 && pp != sp {
		p.CPUFloorUs = max(1000, s.Params.CPUFloorUs*pp/sp)
	}
	return p
}

// App is one Distributed Container and its pools (GET /v1/apps).
type App struct {
	Name string `json:"name"`
	// Auto: created for a container whose app was never defined.
	Auto   bool   `json:"auto"`
	Policy string `json:"policy"`
	// Mode: "enforce" or "recommend" (decisions shown, never applied).
	Mode                string  `json:"mode"`
	CPUCores            float64 `json:"cpu_cores"` // global limit Ω
	CPUAllocatedCores   float64 `json:"cpu_allocated_cores"`
	CPUUnallocatedCores float64 `json:"cpu_unallocated_cores"`
	CPULeasedCores      float64 `json:"cpu_leased_cores"`
	// Shares held for members of hosts whose session ended, until their
	// daemon puts Docker's limits back or they rejoin, so Σ never passes the budget while a host is away.
	CPUHeldCores           float64          `json:"cpu_held_cores,omitempty"`
	MemoryHeldBytes        int64            `json:"memory_held_bytes,omitempty"`
	MemoryBytes            int64            `json:"memory_bytes"` // global limit
	MemoryAllocatedBytes   int64            `json:"memory_allocated_bytes"`
	MemoryUnallocatedBytes int64            `json:"memory_unallocated_bytes"`
	Sigma                  float64          `json:"sigma"`
	Members                int              `json:"members"`
	PendingOOMs            int              `json:"pending_ooms"`
	Params                 allocator.Params `json:"params"`
	// Spec is the spec the app was applied with (nil: defined without one,
	// or auto).
	Spec *spec.Doc `json:"spec,omitempty"`
	// Σ host-local memory credit outstanding (counted as assigned).
	MemoryCreditBytes int64 `json:"memory_credit_bytes,omitempty"`
}

// Host is one connected daemon (GET /v1/hosts).
type Host struct {
	HostID      string    `json:"host_id"`
	SessionID   uint32    `json:"session_id"`
	Peer        string    `json:"peer"`
	Cores       uint32    `json:"cores"`
	MemoryBytes uint64    `json:"memory_bytes"`
	Backend     string    `json:"backend"`
	Kernel      string    `json:"kernel_release,omitempty"`
	Containers  int       `json:"containers"`
	Since       time.Time `json:"connected_since"`
	LastSeen    time.Time `json:"last_seen"`
	// TelemetryDatagrams counts the session's telemetry datagrams taken
	// (checked and routed; dropped ones are in escra_bad_input_total).
	TelemetryDatagrams uint64 `json:"telemetry_datagrams"`
}

// Container is one member with its current limits and counters
// (GET /v1/containers).
type Container struct {
	App              string `json:"app"`
	HostID           string `json:"host_id"`
	SessionID        uint32 `json:"session_id"`
	Handle           uint32 `json:"handle"`
	ContainerID      string `json:"container_id"`
	Name             string `json:"name"`
	CPUQuotaUs       int64  `json:"cpu_quota_us"`
	CPUPeriodUs      int64  `json:"cpu_period_us"`
	CPUUsageUs       int64  `json:"cpu_usage_us_last_period"`
	MemoryLimitBytes int64  `json:"memory_limit_bytes"`
	MemoryUsageBytes int64  `json:"memory_usage_bytes"`
	Generation       uint64 `json:"generation"`
	Periods          uint64 `json:"periods"`
	ThrottledPeriods uint64 `json:"throttled_periods"` // cumulative
	ThrottleEvents   uint64 `json:"throttle_events"`   // cumulative, mid-period (stale ones excluded)
	OOMRequests      uint64 `json:"oom_requests"`
	OOMGrants        uint64 `json:"oom_grants"`
	OOMDenials       uint64 `json:"oom_denials"`
	// What the allocator would set, for an app in recommend mode (the
	// limits above are then the cgroup's own, which Escra leaves alone).
	RecommendedCPUCores    float64 `json:"recommended_cpu_cores,omitempty"`
	RecommendedMemoryBytes int64   `json:"recommended_memory_bytes,omitempty"`
	// The container's caps (max_cpu, max_memory; 0: none).
	MaxCPUCores    float64 `json:"max_cpu_cores,omitempty"`
	MaxMemoryBytes int64   `json:"max_memory_bytes,omitempty"`
}

// CPULimitCores is the quota as cores (0 when unknown).
func (c Container) CPULimitCores() float64 {
	if c.CPUPeriodUs <= 0 || c.CPUQuotaUs <= 0 {
		return 0
	}
	return float64(c.CPUQuotaUs) / float64(c.CPUPeriodUs)
}

// CPUUsageCores is the last period's usage as cores.
func (c Container) CPUUsageCores() float64 {
	if c.CPUPeriodUs <= 0 || c.CPUUsageUs <= 0 {
		return 0
	}
	return float64(c.CPUUsageUs) / float64(c.CPUPeriodUs)
}

// DeployContainer is one container to create (replicas already expanded)
// with its bootstrap limits (Escra §IV-A eq. 2).
type DeployContainer struct {
	Name        string   `json:"name"`
	Image       string   `json:"image"`
	Command     []string `json:"command,omitempty"`
	Env         []string `json:"env,omitempty"` // KEY=VALUE
	Network     string   `json:"network,omitempty"`
	Host        string   `json:"host,omitempty"` // optional host constraint
	CPUCores    float64  `json:"cpu_cores"`
	MemoryBytes int64    `json:"memory_bytes"`
	// CPUClass is the escra.cpu label (WYSIWYG containers): "wysiwyg" places the
	// container by simulated allocation on each candidate host.
	CPUClass string `json:"cpu_class,omitempty"`
}

// DeployRequest is the body of POST /v1/apps/{name}/deploy.
type DeployRequest struct {
	Containers []DeployContainer `json:"containers"`
}

// DeployResponse is its answer: the containers the deployer created. For
// an app that already ran containers (a rollout), what changed by name.
type DeployResponse struct {
	Containers []Placed `json:"containers"`
	Rollout    *Rollout `json:"rollout,omitempty"`
}

// Rollout is what a declarative apply did to a running app, one replica
// at a time: created (scale up), replaced (template changed: removed,
// then created again), removed (scale down), unchanged.
type Rollout struct {
	Created   []string `json:"created,omitempty"`
	Replaced  []string `json:"replaced,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
}

// Version is the body of GET /v1/version.
type Version struct {
	Version string `json:"version"`
	Go      string `json:"go"`
}

// Placed is one container the deployer created.
type Placed struct {
	Name        string `json:"name"`
	HostID      string `json:"host_id"`
	ContainerID string `json:"container_id"`
	// PullMs is the time the host spent pulling the image first (dependency-aware
	// scheduling's provisioning; 0: it was there).
	PullMs float64 `json:"pull_ms,omitempty"`
}
