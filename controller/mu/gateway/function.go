package gateway

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// Function is one routed function and its policies.
type Function struct {
	Name        string        `json:"name"`
	Image       string        `json:"image"`
	CPUCores    float64       `json:"cpu_cores"`    // per replica, bootstrap
	MemoryBytes int64         `json:"memory_bytes"` // per replica
	Concurrency int           `json:"concurrency"`  // container concurrency (Table 2: 10)
	MaxQueue    int           `json:"max_queue"`    // queue proxy queue (Table 2: 100)
	SLO         time.Duration `json:"slo"`
	Autoscaler  string        `json:"autoscaler"` // mu.ASPolicies
	KPATarget   float64       `json:"kpa_target"` // per-pod target for rps/concurrency
	LB          string        `json:"lb"`         // mu.LBPolicies
	Grace       int           `json:"grace"`      // Mu's grace epochs (Table 4: 16)
	// Admission is when requests that would miss the SLO get 503 (§4.1):
	// "slo" whenever the best estimated response exceeds the SLO, "capped"
	// only while the function is capped below N_des, "off" never. Empty:
	// "slo" for the Mu autoscalers, "off" for the Knative baselines.
	Admission   string `json:"admission"`
	MinReplicas int    `json:"min_replicas"`
	// InitialScale is how many replicas the function starts with, before
	// its first request (Knative's initial-scale; 0: from zero, at the
	// first request). Gateway.Prescale starts them.
	InitialScale int `json:"initial_scale"`
	MaxReplicas  int `json:"max_replicas"` // 0: the app budget decides
	// Command is the function server's command line after the queue
	// proxy's "--"; {port} is replaced by its port.
	Command []string `json:"command"`
}

// Validate says what is wrong with a function's configuration.
func (f *Function) Validate() error {
	switch {
	case f.Name == "" || strings.ContainsAny(f.Name, "/ "):
		return fmt.Errorf("function name %q: want a non-empty name without / or spaces", f.Name)
	case f.CPUCores <= 0 || f.MemoryBytes <= 0:
		return fmt.Errorf("function %s: cpu_cores and memory_bytes must be positive", f.Name)
	case f.Concurrency < 1:
		return fmt.Errorf("function %s: concurrency must be ≥ 1", f.Name)
	case f.SLO <= 0:
		return fmt.Errorf("function %s: slo must be positive", f.Name)
	case !slices.Contains(mu.ASPolicies, f.Autoscaler):
		return fmt.Errorf("function %s: autoscaler %q (want one of %v)", f.Name, f.Autoscaler, mu.ASPolicies)
	case !slices.Contains(mu.LBPolicies, f.LB):
		return fmt.Errorf("function %s: lb %q (want one of %v)", f.Name, f.LB, mu.LBPolicies)
	case (f.Autoscaler == mu.ASRPS || f.Autoscaler == mu.ASConcurrency) && f.KPATarget <= 0:
		return fmt.Errorf("function %s: kpa_target must be positive for %s", f.Name, f.Autoscaler)
	case f.InitialScale < 0 || f.MaxReplicas > 0 && f.InitialScale > f.MaxReplicas:
		return fmt.Errorf("function %s: initial_scale %d (want 0..max_replicas)", f.Name, f.InitialScale)
	case f.Admission != "" && !slices.Contains(AdmissionModes, f.Admission):
		return fmt.Errorf("function %s: admission %q (want one of %v)", f.Name, f.Admission, AdmissionModes)
	}
	return nil
}
