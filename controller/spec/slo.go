package spec

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// slo decodes the app's `slo:` section: the latency objective of the
// pema policy (PEMA) and the policy's settings (docs/pema.md).
func (d *decoder) slo(n *yaml.Node, field string) *SLO {
	s := &SLO{}
	seen := d.mapping(n, field, map[string]func(v *yaml.Node, f string){
		"p95":          func(v *yaml.Node, f string) { s.P95 = d.duration(v, f) },
		"interval":     func(v *yaml.Node, f string) { s.Interval = d.duration(v, f) },
		"min_requests": func(v *yaml.Node, f string) { s.MinRequests = d.int(v, f) },
		"listen":       func(v *yaml.Node, f string) { s.Listen = d.str(v, f) },
		"upstream":     func(v *yaml.Node, f string) { s.Upstream = d.str(v, f) },
		"alpha":        func(v *yaml.Node, f string) { s.Alpha = d.float(v, f) },
		"beta":         func(v *yaml.Node, f string) { s.Beta = d.float(v, f) },
		"exploration":  func(v *yaml.Node, f string) { s.Exploration = d.str(v, f) },
		"buffer":       func(v *yaml.Node, f string) { s.Buffer = d.float(v, f) },
		"k":            func(v *yaml.Node, f string) { s.K = d.int(v, f) },
		"range_width":  func(v *yaml.Node, f string) { s.RangeWidth = d.float(v, f) },
		"learn_steps":  func(v *yaml.Node, f string) { s.LearnSteps = d.int(v, f) },
		"min_cpu":      func(v *yaml.Node, f string) { s.MinCPU = d.cpu(v, f) },
		"seed":         func(v *yaml.Node, f string) { s.Seed = uint64(d.int(v, f)) },
		"ranges": func(v *yaml.Node, f string) {
			v = resolve(v)
			if v == nil || v.Kind != yaml.SequenceNode {
				d.err(v, f, "must be a list of request rates, e.g. [0, 200, 400]")
				return
			}
			for i, item := range v.Content {
				s.Ranges = append(s.Ranges, d.float(resolve(item), fmt.Sprintf("%s[%d]", f, i)))
			}
		},
	})
	if _, ok := seen["p95"]; !ok && d.ok() {
		d.err(n, field+".p95", "is required (the latency objective, e.g. 50ms)")
	}
	if d.ok() {
		if err := s.Validate(); err != nil {
			d.err(n, field, err.Error())
		}
	}
	return s
}
