package spec

import (
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/pema"
)

// SLO is an app's latency objective and the settings of the pema policy
// (PEMA) that walks its CPU down to what the objective needs.
type SLO struct {
	P95 time.Duration `json:"p95" yaml:"p95"`
	// Interval between PEMA steps (paper: 2 min; default 20 s).
	Interval time.Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
	// MinRequests: an interval with fewer is not a step (default 2000).
	MinRequests int `json:"min_requests,omitempty" yaml:"min_requests,omitempty"`
	// Listen is the policy's reverse proxy; Upstream the app's entry service.
	Listen   string `json:"listen" yaml:"listen"`
	Upstream string `json:"upstream" yaml:"upstream"`
	// Alpha, Beta: Eqs 3/4 (0: the paper's 0.5, 0.3).
	Alpha float64 `json:"alpha,omitempty" yaml:"alpha,omitempty"`
	Beta  float64 `json:"beta,omitempty" yaml:"beta,omitempty"`
	// Exploration: "low" (A=0.05, B=0.005; default) or "high" (0.1, 0.01).
	Exploration string `json:"exploration,omitempty" yaml:"exploration,omitempty"`
	// Buffer scales R in Eqs 3/4/8 (0: 0.95).
	Buffer float64 `json:"buffer,omitempty" yaml:"buffer,omitempty"`
	// K: intervals in the moving average of Eqs 10/11 (0: 5).
	K int `json:"k,omitempty" yaml:"k,omitempty"`
	// Ranges: workload range edges in rps (§3.4; none: one range).
	Ranges     []float64 `json:"ranges,omitempty" yaml:"ranges,omitempty"`
	RangeWidth float64   `json:"range_width,omitempty" yaml:"range_width,omitempty"`
	// LearnSteps: intervals to fit Eq 9's m with the allocation held.
	LearnSteps int `json:"learn_steps,omitempty" yaml:"learn_steps,omitempty"`
	// MinCPU: PEMA cuts no service below this many cores (0: 0.05; the
	// allocator's cpu_floor also applies).
	MinCPU float64 `json:"min_cpu,omitempty" yaml:"min_cpu,omitempty"`
	Seed   uint64  `json:"seed,omitempty" yaml:"seed,omitempty"`
}

// PEMA converts the SLO to the algorithm's configuration, defaults filled.
func (s SLO) PEMA() (pema.Config, pema.RangeConfig, error) {
	c := pema.DefaultConfig(s.P95.Seconds())
	if s.Alpha != 0 {
		c.Alpha = s.Alpha
	}
	if s.Beta != 0 {
		c.Beta = s.Beta
	}
	switch s.Exploration {
	case "", "low":
	case "high":
		c.A, c.B = 0.1, 0.01
	case "none":
		c.A, c.B = 0, 0
	default:
		return c, pema.RangeConfig{}, fmt.Errorf("slo exploration %q: want low, high or none", s.Exploration)
	}
	if s.Buffer != 0 {
		c.Buffer = s.Buffer
	}
	if s.K != 0 {
		c.K = s.K
	}
	if s.MinCPU != 0 {
		c.MinCPU = s.MinCPU
	}
	rc := pema.RangeConfig{Bounds: s.Ranges, TargetWidth: s.RangeWidth, LearnSteps: s.LearnSteps}
	if err := c.Validate(); err != nil {
		return c, rc, err
	}
	if len(s.Ranges) == 1 {
		return c, rc, fmt.Errorf("slo ranges %v: want at least two edges", s.Ranges)
	}
	for i := 1; i < len(s.Ranges); i++ {
		if !(s.Ranges[i] > s.Ranges[i-1]) || s.Ranges[0] < 0 {
			return c, rc, fmt.Errorf("slo ranges %v: want increasing edges >= 0", s.Ranges)
		}
	}
	if s.RangeWidth < 0 || s.LearnSteps < 0 || s.LearnSteps > 1000 {
		return c, rc, fmt.Errorf("slo range_width %v, learn_steps %d: want >= 0", s.RangeWidth, s.LearnSteps)
	}
	return c, rc, nil
}

// Validate checks the SLO for the pema policy.
func (s SLO) Validate() error {
	if s.P95 <= 0 || s.P95 > time.Hour {
		return fmt.Errorf("slo p95 %v: want > 0", s.P95)
	}
	if s.Interval != 0 && (s.Interval < 100*time.Millisecond || s.Interval > time.Hour) {
		return fmt.Errorf("slo interval %v: want 100ms..1h", s.Interval)
	}
	if s.MinRequests < 0 {
		return fmt.Errorf("slo min_requests %d: want >= 0", s.MinRequests)
	}
	if s.Listen == "" || s.Upstream == "" {
		return fmt.Errorf("slo: the pema policy's proxy needs listen and upstream (host:port)")
	}
	_, _, err := s.PEMA()
	return err
}
