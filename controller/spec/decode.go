package spec

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/internal/names"
)

// maxSpecBytes bounds what Parse reads: a spec is a few kilobytes.
const maxSpecBytes = 1 << 20

// Parse decodes and validates a spec. file names the source in errors.
// It walks yaml.v3 nodes rather than unmarshalling into structs so that every
// error carries a line and a field path, and unknown fields are refused.
func Parse(file string, data []byte) (*App, error) {
	d := &decoder{file: file}
	root := d.document(data)
	if !d.ok() {
		return nil, d.errs
	}
	// yaml.Unmarshal reads the first document only; a second one would be
	// silently ignored, so refuse it.
	if idx := secondDocLine(data); idx > 0 {
		d.errAt(idx, "", "holds more than one YAML document; write one app per file (escractl apply -f takes several)")
		return nil, d.errs
	}
	app := d.app(root)
	if !d.ok() {
		return nil, d.errs
	}
	return app, nil
}

// ParseAll decodes a stream of specs, as escractl apply -f and the
// controller's --apps take them: YAML documents separated by "---", each
// one app or a list of apps (what escractl get apps -o json|yaml prints).
// Every problem in every app is reported.
func ParseAll(file string, data []byte) ([]*App, error) {
	d := &decoder{file: file}
	if len(data) > maxSpecBytes {
		d.errAt(0, "", fmt.Sprintf("is %d bytes; a spec may be at most %d", len(data), maxSpecBytes))
		return nil, d.errs
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var nodes []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.yamlErr(err)
			return nil, d.errs
		}
		if len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
			continue // an empty document, e.g. after a trailing ---
		}
		n := resolve(doc.Content[0])
		if n != nil && n.Kind == yaml.SequenceNode {
			nodes = append(nodes, n.Content...)
			continue
		}
		nodes = append(nodes, doc.Content[0])
	}
	if len(nodes) == 0 {
		d.errAt(0, "", "holds no app; a spec needs at least name, cpu and memory")
		return nil, d.errs
	}
	if len(nodes) > 1000 {
		d.errAt(0, "", fmt.Sprintf("holds %d apps; at most 1000", len(nodes)))
		return nil, d.errs
	}
	var apps []*App
	seen := map[string]int{}
	for _, n := range nodes {
		before := len(d.errs)
		// Each app is checked on its own: one app's mistake does not
		// hide another's (validate looks at d.ok()).
		sub := &decoder{file: d.file}
		a := sub.app(n)
		d.errs = append(d.errs[:before], sub.errs...)
		if len(sub.errs) > 0 {
			continue
		}
		if prev, dup := seen[a.Name]; dup {
			d.errAt(n.Line, "name", fmt.Sprintf("app %q is given twice (first on line %d)", a.Name, prev))
			continue
		}
		seen[a.Name] = n.Line
		apps = append(apps, a)
	}
	if !d.ok() {
		return nil, d.errs
	}
	return apps, nil
}

// document reads the first YAML document of data.
func (d *decoder) document(data []byte) *yaml.Node {
	if len(data) > maxSpecBytes {
		d.errAt(0, "", fmt.Sprintf("is %d bytes; a spec may be at most %d", len(data), maxSpecBytes))
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		d.yamlErr(err)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		d.errAt(0, "", "is empty; a spec needs at least name, cpu and memory")
		return nil
	}
	return doc.Content[0]
}

// app decodes and validates one app's mapping.
func (d *decoder) app(n *yaml.Node) *App {
	app := &App{
		Sigma: DefaultSigma,
		Allocator: Allocator{
			Policy: DefaultPolicy, Kappa: DefaultKappa, Gamma: DefaultGamma,
			Upsilon: DefaultUpsilon, Window: DefaultWindow, Period: DefaultPeriod,
			ReclaimMarginBytes: DefaultReclaimMargin,
			CPUFloor:           DefaultCPUFloor, OOMStepBytes: DefaultOOMStep,
			Headroom: DefaultHeadroom,
		},
		Line: lineOf(n),
		Mode: DefaultMode,
	}
	top := d.mapping(n, "", map[string]func(v *yaml.Node, f string){
		"name": func(v *yaml.Node, f string) {
			app.Name = d.str(v, f)
			if app.Name != "" && !names.ValidApp(app.Name) {
				d.err(v, f, fmt.Sprintf("%q must be %s", app.Name, names.Rule))
			}
		},
		"cpu": func(v *yaml.Node, f string) {
			app.CPU = d.cpu(v, f)
			if d.ok() && app.CPU <= 0 {
				d.err(v, f, "must be above 0 cores")
			}
		},
		"memory": func(v *yaml.Node, f string) {
			app.MemoryBytes = d.bytes(v, f)
			if d.ok() && app.MemoryBytes < 4<<20 {
				d.err(v, f, "must be at least 4MiB")
			}
		},
		"sigma": func(v *yaml.Node, f string) {
			app.Sigma = d.float(v, f)
			if d.ok() && (app.Sigma < 0 || app.Sigma >= 1) {
				d.err(v, f, fmt.Sprintf("%g must be in [0, 1): the share of memory withheld for OOM grants", app.Sigma))
			}
		},
		"allocator": func(v *yaml.Node, f string) {
			app.AllocatorSet = true
			d.allocator(v, f, &app.Allocator)
		},
		"containers": func(v *yaml.Node, f string) { app.Containers = d.containers(v, f) },
		// What the controller reports (escractl get -o yaml): read-only,
		// so a listing applies back unchanged.
		"status": func(v *yaml.Node, f string) {},
		"slo":    func(v *yaml.Node, f string) { app.SLO = d.slo(v, f) },
		"labels": func(v *yaml.Node, f string) { app.Labels = d.labels(v, f) },
		"mode": func(v *yaml.Node, f string) {
			app.Mode = d.str(v, f)
			if d.ok() && app.Mode != ModeEnforce && app.Mode != ModeRecommend {
				d.err(v, f, fmt.Sprintf("%q must be enforce (apply the allocator's limits) or recommend (only show them)", app.Mode))
			}
		},
	})
	if (app.Allocator.Policy == allocator.PolicyPEMA || app.Allocator.Policy == allocator.PolicyPEMAGuarded) && app.SLO == nil && d.ok() {
		d.errAt(top["allocator"], "slo", "is required by policy "+app.Allocator.Policy+" (p95, listen, upstream)")
	}
	d.validate(app, top)
	return app
}

// secondDocLine returns the line of a second document's "---" marker, or 0.
func secondDocLine(data []byte) int {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var n yaml.Node
	if dec.Decode(&n) != nil {
		return 0
	}
	var n2 yaml.Node
	if err := dec.Decode(&n2); err != nil {
		return 0
	}
	if n2.Line > 0 {
		return n2.Line
	}
	return 1
}

type decoder struct {
	file string
	errs Errors
}

func (d *decoder) ok() bool { return len(d.errs) == 0 }

func (d *decoder) errAt(line int, field, msg string) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: msg})
}

func (d *decoder) err(n *yaml.Node, field, msg string) { d.errAt(n.Line, field, msg) }

// yamlErr turns yaml.v3's "yaml: line N: msg" into our file:line form.
func (d *decoder) yamlErr(err error) {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if strings.HasPrefix(msg, "line ") {
		rest := strings.TrimPrefix(msg, "line ")
		if i := strings.Index(rest, ":"); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	d.errAt(line, "", "invalid YAML: "+msg)
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// mapping decodes a YAML mapping whose keys must be among fields; it returns
// the line of each key seen.
func (d *decoder) mapping(n *yaml.Node, field string, fields map[string]func(v *yaml.Node, f string)) map[string]int {
	seen := map[string]int{}
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		what := field
		if what == "" {
			what = "the document"
		}
		d.errAt(lineOf(n), field, fmt.Sprintf("must be a mapping of fields (%s is %s)", what, kindName(n)))
		return seen
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.err(n.Content[i], field, "field names must be plain words")
			continue
		}
		f := join(field, k.Value)
		fn, known := fields[k.Value]
		if !known {
			d.err(k, f, "unknown field (known: "+strings.Join(keys(fields), ", ")+")")
			continue
		}
		if prev, dup := seen[k.Value]; dup {
			d.err(k, f, fmt.Sprintf("given twice (first on line %d)", prev))
			continue
		}
		seen[k.Value] = k.Line
		if v = resolve(v); v == nil {
			d.err(k, f, "has no value")
			continue
		}
		fn(v, f)
	}
	return seen
}

func keys(m map[string]func(v *yaml.Node, f string)) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "status" { // read-only: not a field to suggest
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (d *decoder) allocator(n *yaml.Node, field string, a *Allocator) {
	// range checks a float field against (lo, hi].
	rangeF := func(dst *float64, lo, hi float64, what string) func(v *yaml.Node, f string) {
		return func(v *yaml.Node, f string) {
			*dst = d.float(v, f)
			if d.ok() && (*dst <= lo || *dst > hi) {
				d.err(v, f, fmt.Sprintf("%g must be above %g and at most %g (%s)", *dst, lo, hi, what))
			}
		}
	}
	seen := d.mapping(n, field, map[string]func(v *yaml.Node, f string){
		"policy": func(v *yaml.Node, f string) {
			a.Policy = d.str(v, f)
			if d.ok() {
				if _, err := allocator.PolicyByName(a.Policy); err != nil {
					d.err(v, f, err.Error())
				}
			}
		},
		"kappa": rangeF(&a.Kappa, 0, 1, "κ, the scale-down rate"),
		"gamma": func(v *yaml.Node, f string) {
			a.Gamma = d.float(v, f)
			if d.ok() && (a.Gamma < 0 || a.Gamma >= 1) {
				d.err(v, f, fmt.Sprintf("%g must be in [0, 1) (γ, the unused share of the quota that triggers a scale-down)", a.Gamma))
			}
		},
		"upsilon": rangeF(&a.Upsilon, 0, 1000, "Υ, the scale-up rate"),
		"window": func(v *yaml.Node, f string) {
			a.Window = d.int(v, f)
			if d.ok() && (a.Window < 1 || a.Window > 1000) {
				d.err(v, f, fmt.Sprintf("%d must be between 1 and 1000 periods", a.Window))
			}
		},
		"period": func(v *yaml.Node, f string) {
			a.Period = d.duration(v, f)
			if d.ok() && (a.Period < time.Millisecond || a.Period > time.Second) {
				d.err(v, f, fmt.Sprintf("%s must be between 1ms and 1s (the CFS period)", a.Period))
			}
		},
		"reclaim_margin": func(v *yaml.Node, f string) { a.ReclaimMarginBytes = d.bytes(v, f) },
		"cpu_floor": func(v *yaml.Node, f string) {
			a.CPUFloor = d.cpu(v, f)
			if d.ok() && (a.CPUFloor < 0.01 || a.CPUFloor > 1) {
				d.err(v, f, fmt.Sprintf("%g must be between 10m and 1 core (CFS's smallest quota is 1 ms per period)", a.CPUFloor))
			}
		},
		"headroom": func(v *yaml.Node, f string) {
			a.Headroom = d.float(v, f)
			if d.ok() && (a.Headroom < 0 || a.Headroom > 10) {
				d.err(v, f, fmt.Sprintf("%g must be between 0 and 10 (a share of the peak usage a scale-down keeps above it)", a.Headroom))
			}
		},
		"oom_step": func(v *yaml.Node, f string) {
			a.OOMStepBytes = d.bytes(v, f)
			if d.ok() && a.OOMStepBytes < 4096 {
				d.err(v, f, "must be at least 4KiB (one page)")
			}
		},
	})
	for k := range seen {
		if k != "policy" {
			a.Named = append(a.Named, k)
		}
	}
	slices.Sort(a.Named)
}

func (d *decoder) containers(n *yaml.Node, field string) []Container {
	if n.Kind != yaml.SequenceNode {
		d.err(n, field, fmt.Sprintf("must be a list of containers, not %s", kindName(n)))
		return nil
	}
	if len(n.Content) == 0 {
		d.err(n, field, "must list at least one container (leave the field out for a budget-only app)")
		return nil
	}
	if len(n.Content) > 1000 {
		d.err(n, field, "lists more than 1000 containers")
		return nil
	}
	out := make([]Container, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		c := Container{Replicas: DefaultReplicas, Network: DefaultNetwork, Line: item.Line}
		seen := d.mapping(item, f, map[string]func(v *yaml.Node, f string){
			"name": func(v *yaml.Node, f string) {
				c.Name = d.str(v, f)
				if c.Name != "" && !names.ValidLabel(c.Name) {
					d.err(v, f, fmt.Sprintf("%q must be %s", c.Name, names.Rule))
				}
			},
			"image": func(v *yaml.Node, f string) {
				c.Image = d.str(v, f)
				if strings.ContainsAny(c.Image, " \t\n") {
					d.err(v, f, fmt.Sprintf("%q is not an image reference (it holds spaces)", c.Image))
				}
			},
			"command": func(v *yaml.Node, f string) { c.Command = d.strList(v, f) },
			"env":     func(v *yaml.Node, f string) { c.Env = d.env(v, f) },
			"replicas": func(v *yaml.Node, f string) {
				c.Replicas = d.int(v, f)
				if d.ok() && (c.Replicas < 1 || c.Replicas > 1000) {
					d.err(v, f, fmt.Sprintf("%d must be ≥ 1 and ≤ 1000", c.Replicas))
				}
			},
			"host": func(v *yaml.Node, f string) {
				c.Host = d.str(v, f)
				if c.Host != "" && !hostRE.MatchString(c.Host) {
					d.err(v, f, fmt.Sprintf("%q is not a host id (letters, digits, '.', '_' or '-')", c.Host))
				}
			},
			"network": func(v *yaml.Node, f string) {
				c.Network = d.str(v, f)
				if d.ok() && c.Network != "none" && c.Network != "host" {
					d.err(v, f, fmt.Sprintf("%q must be none or host", c.Network))
				}
			},
			"cpu_placement": func(v *yaml.Node, f string) {
				c.CPUClass = d.str(v, f)
				switch c.CPUClass {
				case "wysiwyg", "shared", "auto":
				default:
					if d.ok() {
						d.err(v, f, fmt.Sprintf("%q must be wysiwyg, shared or auto", c.CPUClass))
					}
				}
			},
			"min_cpu":    func(v *yaml.Node, f string) { c.MinCPU = d.cpu(v, f) },
			"min_memory": func(v *yaml.Node, f string) { c.MinBytes = d.bytes(v, f) },
			"max_cpu": func(v *yaml.Node, f string) {
				c.MaxCPU = d.cpu(v, f)
				if d.ok() && c.MaxCPU <= 0 {
					d.err(v, f, "must be above 0 cores (leave it out for no cap)")
				}
			},
			"max_memory": func(v *yaml.Node, f string) {
				c.MaxBytes = d.bytes(v, f)
				if d.ok() && c.MaxBytes < 4<<20 {
					d.err(v, f, "must be at least 4MiB (leave it out for no cap)")
				}
			},
		})
		if item = resolve(item); item != nil && item.Kind == yaml.MappingNode && d.ok() {
			if _, ok := seen["name"]; !ok {
				d.err(item, f+".name", "is required")
			}
			if _, ok := seen["image"]; !ok {
				d.err(item, f+".image", "is required")
			}
		}
		out = append(out, c)
	}
	return out
}

func (d *decoder) strList(n *yaml.Node, field string) []string {
	if n.Kind != yaml.SequenceNode {
		d.err(n, field, fmt.Sprintf("must be a list of strings, e.g. [\"/app\", \"serve\"], not %s", kindName(n)))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		s, ok := d.scalar(resolve(item), fmt.Sprintf("%s[%d]", field, i), "a string")
		if ok {
			out = append(out, s)
		}
	}
	return out
}

func (d *decoder) env(n *yaml.Node, field string) map[string]string {
	if n.Kind != yaml.MappingNode {
		d.err(n, field, fmt.Sprintf("must be a mapping of NAME: value, not %s", kindName(n)))
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode || !envRE.MatchString(k.Value) {
			d.err(n.Content[i], field, "variable names must be letters, digits and '_', not starting with a digit")
			continue
		}
		f := field + "." + k.Value
		if _, dup := out[k.Value]; dup {
			d.err(k, f, "given twice")
			continue
		}
		if v == nil || v.Kind != yaml.ScalarNode {
			d.err(k, f, "must be a plain value")
			continue
		}
		if v.Tag == "!!null" {
			out[k.Value] = ""
			continue
		}
		out[k.Value] = v.Value
	}
	return out
}
