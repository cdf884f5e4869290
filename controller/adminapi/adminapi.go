// Package adminapi holds the JSON bodies of the controller's admin API
// (/v1/apps, /v1/containers, /v1/hosts, deploy): one definition that
// controller/server encodes and controller/adminclient decodes, so the two
// cannot drift apart.
package adminapi

import (
	"fmt"
	"regexp"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
)

// AppSpec defines a Distributed Container (seed 000 §IV-A): the body of
// PUT /v1/apps/{name} and an element of an --apps file.
type AppSpec struct {
	Name        string  `json:"name" yaml:"name"`
	CPUCores    float64 `json:"cpu_cores" yaml:"cpu_cores"`       // Ω
	MemoryBytes int64   `json:"memory_bytes" yaml:"memory_bytes"` // global memory limit
	// Sigma is the share of the memory budget withheld from bootstrap for
	// OOM grants, 0 <= σ < 1.
	Sigma  float64           `json:"sigma" yaml:"sigma"`
	Params *allocator.Params `json:"params,omitempty" yaml:"params,omitempty"`
	// Policy is the allocator policy (allocator.PolicyNames; "" = the
	// controller's default).
	Policy string `json:"policy,omitempty" yaml:"policy,omitempty"`
	// SLO is the latency objective the pema policy needs (seed 002).
	SLO *SLO `json:"slo,omitempty" yaml:"slo,omitempty"`
}

var appName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// ValidAppName reports whether name can name an app.
func ValidAppName(name string) bool { return appName.MatchString(name) }

// Validate checks the spec.
func (s AppSpec) Validate() error {
	if !ValidAppName(s.Name) {
		return fmt.Errorf("app name %q: want 1-128 of [A-Za-z0-9_.-]", s.Name)
	}
	if err := (allocator.Budget{CPUCores: s.CPUCores, MemoryBytes: s.MemoryBytes, Sigma: s.Sigma}).Validate(); err != nil {
		return fmt.Errorf("app %s: %w", s.Name, err)
	}
	if s.Params != nil {
		if err := s.Params.Validate(); err != nil {
			return fmt.Errorf("app %s: %w", s.Name, err)
		}
	}
	if s.Policy != "" {
		if _, err := allocator.PolicyByName(s.Policy); err != nil {
			return fmt.Errorf("app %s: policy: %w", s.Name, err)
		}
	}
	if s.Policy == allocator.PolicyPEMA && s.SLO == nil {
		return fmt.Errorf("app %s: policy pema needs an slo (p95, listen, upstream)", s.Name)
	}
	if s.SLO != nil {
		if err := s.SLO.Validate(); err != nil {
			return fmt.Errorf("app %s: %w", s.Name, err)
		}
	}
	return nil
}

// App is one Distributed Container and its pools (GET /v1/apps).
type App struct {
	Name string `json:"name"`
	// Auto: created for a container whose app was never defined.
	Auto                   bool             `json:"auto"`
	Policy                 string           `json:"policy"`
	CPUCores               float64          `json:"cpu_cores"` // global limit Ω
	CPUAllocatedCores      float64          `json:"cpu_allocated_cores"`
	CPUUnallocatedCores    float64          `json:"cpu_unallocated_cores"`
	CPULeasedCores         float64          `json:"cpu_leased_cores"`
	MemoryBytes            int64            `json:"memory_bytes"` // global limit
	MemoryAllocatedBytes   int64            `json:"memory_allocated_bytes"`
	MemoryUnallocatedBytes int64            `json:"memory_unallocated_bytes"`
	Sigma                  float64          `json:"sigma"`
	Members                int              `json:"members"`
	PendingOOMs            int              `json:"pending_ooms"`
	Params                 allocator.Params `json:"params"`
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
// with its bootstrap limits (seed 000 §IV-A eq. 2).
type DeployContainer struct {
	Name        string   `json:"name"`
	Image       string   `json:"image"`
	Command     []string `json:"command,omitempty"`
	Env         []string `json:"env,omitempty"` // KEY=VALUE
	Network     string   `json:"network,omitempty"`
	Host        string   `json:"host,omitempty"` // optional host constraint
	CPUCores    float64  `json:"cpu_cores"`
	MemoryBytes int64    `json:"memory_bytes"`
}

// DeployRequest is the body of POST /v1/apps/{name}/deploy.
type DeployRequest struct {
	Containers []DeployContainer `json:"containers"`
}

// DeployResponse is its answer: the containers the deployer created.
type DeployResponse struct {
	Containers []Placed `json:"containers"`
}

// Placed is one container the deployer created.
type Placed struct {
	Name        string `json:"name"`
	HostID      string `json:"host_id"`
	ContainerID string `json:"container_id"`
}
