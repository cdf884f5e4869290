package spec

import (
	"maps"
	"math"
	"reflect"
	"sort"
	"strconv"
)

// Doc is a spec as a document: the same field names as the YAML a user
// writes (docs/spec.md), in JSON and YAML alike, with quantities written
// so that they parse back to the same values. The controller keeps the
// Doc an app was applied with; escractl get apps -o yaml|json prints it,
// and escractl apply -f takes it back unchanged.
type Doc struct {
	Name       string            `json:"name" yaml:"name"`
	Labels     map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	CPU        string            `json:"cpu" yaml:"cpu"`
	Memory     string            `json:"memory" yaml:"memory"`
	Sigma      float64           `json:"sigma" yaml:"sigma"`
	Mode       string            `json:"mode,omitempty" yaml:"mode,omitempty"`
	Allocator  *DocAllocator     `json:"allocator,omitempty" yaml:"allocator,omitempty"`
	SLO        *DocSLO           `json:"slo,omitempty" yaml:"slo,omitempty"`
	Containers []DocContainer    `json:"containers,omitempty" yaml:"containers,omitempty"`
}

// DocSLO is the pema policy's slo section, durations written as the spec
// takes them ("50ms") in YAML and JSON alike.
type DocSLO struct {
	P95         string    `json:"p95" yaml:"p95"`
	Interval    string    `json:"interval,omitempty" yaml:"interval,omitempty"`
	MinRequests int       `json:"min_requests,omitempty" yaml:"min_requests,omitempty"`
	Listen      string    `json:"listen" yaml:"listen"`
	Upstream    string    `json:"upstream" yaml:"upstream"`
	Alpha       float64   `json:"alpha,omitempty" yaml:"alpha,omitempty"`
	Beta        float64   `json:"beta,omitempty" yaml:"beta,omitempty"`
	Exploration string    `json:"exploration,omitempty" yaml:"exploration,omitempty"`
	Buffer      float64   `json:"buffer,omitempty" yaml:"buffer,omitempty"`
	K           int       `json:"k,omitempty" yaml:"k,omitempty"`
	Ranges      []float64 `json:"ranges,omitempty" yaml:"ranges,omitempty,flow"`
	RangeWidth  float64   `json:"range_width,omitempty" yaml:"range_width,omitempty"`
	LearnSteps  int       `json:"learn_steps,omitempty" yaml:"learn_steps,omitempty"`
	MinCPU      string    `json:"min_cpu,omitempty" yaml:"min_cpu,omitempty"`
	Seed        uint64    `json:"seed,omitempty" yaml:"seed,omitempty"`
}

// DocAllocator is the allocator section, every field written out.
type DocAllocator struct {
	Policy        string  `json:"policy" yaml:"policy"`
	Kappa         float64 `json:"kappa" yaml:"kappa"`
	Gamma         float64 `json:"gamma" yaml:"gamma"`
	Upsilon       float64 `json:"upsilon" yaml:"upsilon"`
	Window        int     `json:"window" yaml:"window"`
	Period        string  `json:"period" yaml:"period"`
	ReclaimMargin string  `json:"reclaim_margin" yaml:"reclaim_margin"`
	CPUFloor      string  `json:"cpu_floor" yaml:"cpu_floor"`
	Headroom      float64 `json:"headroom" yaml:"headroom"`
	OOMStep       string  `json:"oom_step" yaml:"oom_step"`
}

// DocContainer is one container template.
type DocContainer struct {
	Name      string            `json:"name" yaml:"name"`
	Image     string            `json:"image" yaml:"image"`
	Command   []string          `json:"command,omitempty" yaml:"command,omitempty,flow"`
	Env       map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Replicas  int               `json:"replicas" yaml:"replicas"`
	Host      string            `json:"host,omitempty" yaml:"host,omitempty"`
	Network   string            `json:"network" yaml:"network"`
	MinCPU    string            `json:"min_cpu,omitempty" yaml:"min_cpu,omitempty"`
	MinMemory string            `json:"min_memory,omitempty" yaml:"min_memory,omitempty"`
	MaxCPU    string            `json:"max_cpu,omitempty" yaml:"max_cpu,omitempty"`
	MaxMemory string            `json:"max_memory,omitempty" yaml:"max_memory,omitempty"`
}

// Doc returns the app as a canonical document: defaults written out, so
// two specs that mean the same have equal Docs.
func (a *App) Doc() Doc {
	d := Doc{Name: a.Name, CPU: FormatCPU(a.CPU), Memory: FormatBytesExact(a.MemoryBytes), Sigma: a.Sigma}
	if len(a.Labels) > 0 {
		d.Labels = maps.Clone(a.Labels)
	}
	if a.Mode == ModeRecommend { // enforce, the default, is left out
		d.Mode = a.Mode
	}
	if a.AllocatorSet {
		al := a.Allocator
		d.Allocator = &DocAllocator{Policy: al.Policy, Kappa: al.Kappa, Gamma: al.Gamma, Upsilon: al.Upsilon,
			Window: al.Window, Period: al.Period.String(), ReclaimMargin: FormatBytesExact(al.ReclaimMarginBytes),
			CPUFloor: FormatCPU(al.CPUFloor), Headroom: al.Headroom, OOMStep: FormatBytesExact(al.OOMStepBytes)}
	}
	if o := a.SLO; o != nil {
		d.SLO = &DocSLO{P95: o.P95.String(), MinRequests: o.MinRequests, Listen: o.Listen, Upstream: o.Upstream,
			Alpha: o.Alpha, Beta: o.Beta, Exploration: o.Exploration, Buffer: o.Buffer, K: o.K, Ranges: o.Ranges,
			RangeWidth: o.RangeWidth, LearnSteps: o.LearnSteps, Seed: o.Seed}
		if o.Interval > 0 {
			d.SLO.Interval = o.Interval.String()
		}
		if o.MinCPU > 0 {
			d.SLO.MinCPU = FormatCPU(o.MinCPU)
		}
	}
	for _, c := range a.Containers {
		dc := DocContainer{Name: c.Name, Image: c.Image, Command: c.Command, Replicas: c.Replicas, Host: c.Host, Network: c.Network}
		if len(c.Env) > 0 {
			dc.Env = make(map[string]string, len(c.Env))
			for k, v := range c.Env {
				dc.Env[k] = v
			}
		}
		if c.MinCPU > 0 {
			dc.MinCPU = FormatCPU(c.MinCPU)
		}
		if c.MinBytes > 0 {
			dc.MinMemory = FormatBytesExact(c.MinBytes)
		}
		if c.MaxCPU > 0 {
			dc.MaxCPU = FormatCPU(c.MaxCPU)
		}
		if c.MaxBytes > 0 {
			dc.MaxMemory = FormatBytesExact(c.MaxBytes)
		}
		d.Containers = append(d.Containers, dc)
	}
	return d
}

// Equal reports whether two documents describe the same app.
func (d Doc) Equal(o Doc) bool {
	if d.Name != o.Name || d.CPU != o.CPU || d.Memory != o.Memory || d.Sigma != o.Sigma || d.Mode != o.Mode ||
		(d.Allocator == nil) != (o.Allocator == nil) || len(d.Containers) != len(o.Containers) {
		return false
	}
	if d.Allocator != nil && *d.Allocator != *o.Allocator || !maps.Equal(d.Labels, o.Labels) {
		return false
	}
	if (d.SLO == nil) != (o.SLO == nil) || d.SLO != nil && !reflect.DeepEqual(*d.SLO, *o.SLO) {
		return false
	}
	for i := range d.Containers {
		if !d.Containers[i].Equal(o.Containers[i]) {
			return false
		}
	}
	return true
}

// Equal reports whether two templates are the same; Template whether
// they make the same containers (all but the replica count and the
// maxima, which the allocator applies to running containers).
func (c DocContainer) Equal(o DocContainer) bool {
	return c.Replicas == o.Replicas && c.MaxCPU == o.MaxCPU && c.MaxMemory == o.MaxMemory && c.Template(o)
}

// Template reports whether c and o create identical containers.
func (c DocContainer) Template(o DocContainer) bool {
	if c.Name != o.Name || c.Image != o.Image || c.Host != o.Host || c.Network != o.Network ||
		c.MinCPU != o.MinCPU || c.MinMemory != o.MinMemory || len(c.Command) != len(o.Command) || len(c.Env) != len(o.Env) {
		return false
	}
	for i := range c.Command {
		if c.Command[i] != o.Command[i] {
			return false
		}
	}
	for k, v := range c.Env {
		if w, ok := o.Env[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// EnvKeys are c's variable names, sorted.
func (c DocContainer) EnvKeys() []string {
	ks := make([]string, 0, len(c.Env))
	for k := range c.Env {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// FormatCPU writes cores so that ParseCPU reads back the same float64:
// the shortest decimal that round-trips.
func FormatCPU(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// FormatBytesExact writes a byte count in the largest binary unit that
// keeps it exact with at most two decimals (1.5GiB, 640MiB), else in
// bytes; ParseBytes reads back the same number.
func FormatBytesExact(b int64) string {
	for _, u := range []struct {
		s string
		m float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b < int64(u.m) {
			continue
		}
		v := float64(b) / u.m
		if v*100 == math.Trunc(v*100) {
			s := strconv.FormatFloat(v, 'f', -1, 64) + u.s
			if n, err := ParseBytes(s); err == nil && n == b {
				return s
			}
		}
	}
	return strconv.FormatInt(b, 10)
}
