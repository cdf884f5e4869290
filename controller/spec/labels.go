package spec

import (
	"fmt"
	"regexp"

	"gopkg.in/yaml.v3"
)

// labelKeyRE is a label key (an optional DNS-style prefix and "/") or value:
// what Docker labels and Kubernetes selectors both take.
var (
	labelKeyRE   = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
)

// ValidLabel reports whether k: v can be an app's label.
func ValidLabel(k, v string) bool { return labelKeyRE.MatchString(k) && labelValueRE.MatchString(v) }

func (d *decoder) labels(n *yaml.Node, field string) map[string]string {
	if n.Kind != yaml.MappingNode {
		d.err(n, field, fmt.Sprintf("must be a mapping of key: value, not %s", kindName(n)))
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode || !labelKeyRE.MatchString(k.Value) {
			d.err(n.Content[i], field, "keys must be up to 63 letters, digits, '.', '_' or '-' (an optional prefix/ before), starting and ending with a letter or digit")
			continue
		}
		f := field + "." + k.Value
		if _, dup := out[k.Value]; dup {
			d.err(k, f, "given twice")
			continue
		}
		if v == nil || v.Kind != yaml.ScalarNode || !labelValueRE.MatchString(v.Value) {
			d.err(k, f, "must be up to 63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit")
			continue
		}
		out[k.Value] = v.Value
	}
	return out
}
