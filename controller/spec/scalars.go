package spec

// The YAML scalars of a spec, each decoded with one clear error line that
// names the field and its line.

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

func kindName(n *yaml.Node) string {
	if n == nil {
		return "empty"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "not a value"
}

func (d *decoder) scalar(n *yaml.Node, field, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.err(n, field, fmt.Sprintf("must be %s, not %s", want, kindName(n)))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) str(n *yaml.Node, field string) string {
	s, ok := d.scalar(n, field, "a string")
	if ok && s == "" {
		d.err(n, field, "must not be empty")
	}
	return s
}

func (d *decoder) float(n *yaml.Node, field string) float64 {
	s, ok := d.scalar(n, field, "a number")
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || n.Tag == "!!str" || math.IsNaN(v) || math.IsInf(v, 0) {
		d.err(n, field, fmt.Sprintf("%q is not a number", s))
		return 0
	}
	return v
}

func (d *decoder) int(n *yaml.Node, field string) int {
	s, ok := d.scalar(n, field, "a whole number")
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n.Tag == "!!str" {
		d.err(n, field, fmt.Sprintf("%q is not a whole number", s))
		return 0
	}
	return int(v)
}

func (d *decoder) cpu(n *yaml.Node, field string) float64 {
	s, ok := d.scalar(n, field, "a CPU quantity in cores")
	if !ok {
		return 0
	}
	v, err := ParseCPU(s)
	if err != nil {
		d.err(n, field, err.Error())
	}
	return v
}

func (d *decoder) bytes(n *yaml.Node, field string) int64 {
	s, ok := d.scalar(n, field, "a memory quantity")
	if !ok {
		return 0
	}
	v, err := ParseBytes(s)
	if err != nil {
		d.err(n, field, err.Error())
	}
	return v
}

func (d *decoder) duration(n *yaml.Node, field string) time.Duration {
	s, ok := d.scalar(n, field, "a duration")
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.err(n, field, fmt.Sprintf("%q is not a duration (write e.g. 100ms, 5s)", s))
		return 0
	}
	return v
}
