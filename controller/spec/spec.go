// Package spec reads the YAML description of a Distributed Container (Escra
// §IV-A): one app, its global CPU and memory limits, σ, the allocator's
// parameters, and the containers that share the budget. Every error names the
// file, line and field, so a user can fix a spec without guessing.
//
// The schema is documented in docs/spec.md; examples are in docs/examples/.
package spec

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Defaults from the paper (Escra §V: κ = 0.8, γ = 0.2, Υ = 20; §IV-C:
// a 50 MiB reclaim safe margin). The window length n, σ, the CPU floor and
// the OOM step are not given there; these are our choices (docs/spec.md).
// The reclaim interval (5 s) is the controller's, not an app's.
const (
	DefaultSigma         = 0.1
	DefaultPolicy        = "escra"
	DefaultKappa         = 0.8
	DefaultGamma         = 0.2
	DefaultUpsilon       = 20.0
	DefaultWindow        = 10
	DefaultPeriod        = 100 * time.Millisecond
	DefaultReclaimMargin = 50 << 20
	DefaultCPUFloor      = 0.02     // cores: 2 ms of a 100 ms period, allocator.DefaultParams' floor
	DefaultOOMStep       = 64 << 20 // bytes granted per OOM request
	DefaultHeadroom      = 0.1      // scale-down floor above the window's peak (docs/allocator.md)
	DefaultReplicas      = 1
	DefaultNetwork       = "none"
	DefaultMode          = ModeEnforce
)

// Modes: whether the controller carries out its decisions.
const (
	// ModeEnforce: decisions are applied to the containers' cgroups.
	ModeEnforce = "enforce"
	// ModeRecommend: decisions are computed every period and shown
	// (status, metrics) but never sent to the daemons; OOM requests are
	// denied, so the kernel acts at the container's own limit as it would
	// without Escra.
	ModeRecommend = "recommend"
)

// App is one Distributed Container: containers on any hosts that share one
// global CPU and memory budget.
type App struct {
	Name        string
	CPU         float64 // global CPU limit in cores (Ω_l of §IV-D-1)
	MemoryBytes int64   // global memory limit
	Sigma       float64 // share of memory withheld at deploy for OOM grants (§IV-A eq. 2)
	Allocator   Allocator
	// AllocatorSet: the spec has an allocator section. Without one the app
	// uses the controller's configured parameters.
	AllocatorSet bool
	// Containers: none for a budget-only app, whose containers join with
	// docker run --label escra.app=NAME.
	Containers []Container
	Line       int // where the app starts in its file
	// SLO: the latency objective of the pema policy (PEMA).
	SLO *SLO
	// Labels name the app to selectors (escractl get -l team=web).
	Labels map[string]string
	// Mode is ModeEnforce or ModeRecommend.
	Mode string
}

// Allocator holds the resource allocator's parameters (Escra §IV-C/D).
type Allocator struct {
	Policy             string        // "escra" (default), "escra-paper", "pema" or "pema-guarded" (docs/spec.md)
	Kappa              float64       // κ: scale-down rate
	Gamma              float64       // γ: unused share of the quota above which the quota shrinks
	Upsilon            float64       // Υ: scale-up rate
	Window             int           // n: periods in the sliding windows
	Period             time.Duration // CFS period
	ReclaimMarginBytes int64         // δ: reclaim safe margin
	CPUFloor           float64       // smallest CPU limit, cores
	OOMStepBytes       int64         // memory granted per OOM request (§IV-D-2)
	Headroom           float64       // ours: a scale-down keeps (1+h) × the window's peak usage
	// Named lists the parameters the section gives (policy aside); the
	// others are the controller's own (its flags), not the defaults here.
	Named []string
}

// Container is one container template, run Replicas times.
type Container struct {
	Name     string
	Image    string
	Command  []string
	Env      map[string]string
	Replicas int
	Host     string // optional: only on this host id
	Network  string // "none" (loopback only) or "host"
	CPUClass string // escra.cpu (WYSIWYG containers): "wysiwyg", "shared", "auto" or ""
	MinCPU   float64
	MinBytes int64
	// MaxCPU and MaxBytes cap what the allocator gives each replica (0:
	// no cap beyond the host and the app's budget).
	MaxCPU   float64
	MaxBytes int64
	Line     int // where the entry starts in the file
}

// Replicas is the total number of containers the app runs.
func (a *App) Replicas() int {
	n := 0
	for _, c := range a.Containers {
		n += c.Replicas
	}
	return n
}

// Bootstrap is the CPU (cores) and memory (bytes) each replica of c starts
// with, before the controller takes over (Escra §IV-A eq. 2): every replica
// gets its minimum, and what is left of the global CPU limit, and of the global
// memory limit less the withheld share σ, is split equally over all replicas.
func (a *App) Bootstrap(c *Container) (cpu float64, mem int64) {
	n := float64(a.Replicas())
	if n == 0 {
		return 0, 0
	}
	var minCPU float64
	var minMem int64
	for _, o := range a.Containers {
		minCPU += o.MinCPU * float64(o.Replicas)
		minMem += o.MinBytes * int64(o.Replicas)
	}
	cpu = c.MinCPU + math.Max(0, a.CPU-minCPU)/n
	memPool := float64(a.MemoryBytes) * (1 - a.Sigma)
	mem = c.MinBytes + int64(math.Max(0, memPool-float64(minMem))/n)
	if c.MaxCPU > 0 {
		cpu = math.Min(cpu, c.MaxCPU)
	}
	if c.MaxBytes > 0 {
		mem = min(mem, c.MaxBytes)
	}
	return cpu, mem
}

// Error is one problem in a spec, at a line of a file.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one spec, in file order. Its message
// lists them all, one a line, as kubectl does.
type Errors []*Error

func (es Errors) Error() string {
	if len(es) == 0 {
		return "no errors"
	}
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads and validates the spec in path.
func Load(path string) (*App, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
	}
	return Parse(filepath.Base(path), data)
}

// LoadAll reads every app in path (ParseAll).
func LoadAll(path string) ([]*App, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPathErr(err))
	}
	return ParseAll(filepath.Base(path), data)
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

var (
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hostRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
)

// validate checks what no single field can: limits against minimums, names
// unique. It runs after decoding, so every field already has a value.
func (d *decoder) validate(a *App, top map[string]int) {
	if a.Name == "" && d.ok() {
		d.errAt(max(a.Line, 1), "name", "is required")
	}
	if _, ok := top["cpu"]; !ok && d.ok() {
		d.errAt(max(a.Line, 1), "cpu", "is required (the app's global CPU limit in cores)")
	}
	if _, ok := top["memory"]; !ok && d.ok() {
		d.errAt(max(a.Line, 1), "memory", "is required (the app's global memory limit, e.g. 2GiB)")
	}
	if !d.ok() {
		return
	}
	seen := map[string]int{}
	var minCPU float64
	var minMem int64
	for i, c := range a.Containers {
		f := fmt.Sprintf("containers[%d]", i)
		if prev, dup := seen[c.Name]; dup {
			d.errAt(c.Line, f+".name", fmt.Sprintf("%q is already used by containers[%d]", c.Name, prev))
		}
		seen[c.Name] = i
		if c.MinCPU > a.CPU {
			d.errAt(c.Line, f+".min_cpu", fmt.Sprintf("%g cores is above the app's cpu limit of %g", c.MinCPU, a.CPU))
		}
		if c.MinBytes > a.MemoryBytes {
			d.errAt(c.Line, f+".min_memory", fmt.Sprintf("%s is above the app's memory limit of %s", FormatBytes(c.MinBytes), FormatBytes(a.MemoryBytes)))
		}
		if c.MaxCPU > 0 && c.MaxCPU < c.MinCPU {
			d.errAt(c.Line, f+".max_cpu", fmt.Sprintf("%g cores is below its min_cpu of %g", c.MaxCPU, c.MinCPU))
		} else if c.MaxCPU > 0 && c.MaxCPU < a.Allocator.CPUFloor {
			d.errAt(c.Line, f+".max_cpu", fmt.Sprintf("%g cores is below the allocator's cpu_floor of %g", c.MaxCPU, a.Allocator.CPUFloor))
		}
		if c.MaxBytes > 0 && c.MaxBytes < c.MinBytes {
			d.errAt(c.Line, f+".max_memory", fmt.Sprintf("%s is below its min_memory of %s", FormatBytes(c.MaxBytes), FormatBytes(c.MinBytes)))
		}
		minCPU += c.MinCPU * float64(c.Replicas)
		minMem += c.MinBytes * int64(c.Replicas)
	}
	if !d.ok() {
		return
	}
	// An impossible budget: the minimums alone exceed the global limit.
	const eps = 1e-9
	if minCPU > a.CPU+eps {
		d.errAt(top["cpu"], "cpu", fmt.Sprintf("the containers' min_cpu × replicas add up to %g cores, above the limit of %g", minCPU, a.CPU))
	}
	if minMem > a.MemoryBytes {
		d.errAt(top["memory"], "memory", fmt.Sprintf("the containers' min_memory × replicas add up to %s, above the limit of %s", FormatBytes(minMem), FormatBytes(a.MemoryBytes)))
	}
}
