package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A small JSONPath for -o jsonpath=TEMPLATE, in kubectl's template form:
// text with {PATH} or {"literal"} parts, PATH a chain of .key, .*, [N]
// (negative from the end), [*] and ['key'] from the printed JSON. A list
// is the JSON array -o json prints; kubectl's .items names it too, so
// {.items[*].name} and {[*].name} are the same. Matches of one part are
// joined by spaces, as kubectl does. Not supported: filters, slices,
// recursive descent, range/end.

type jpStep struct {
	key   string // "" with index/all
	index int
	all   bool
	isIdx bool
}

type jpPart struct {
	text  string // literal text (outside braces or a quoted literal)
	steps []jpStep
	path  bool
}

func parseJSONPath(tmpl string) ([]jpPart, error) {
	var parts []jpPart
	for len(tmpl) > 0 {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			parts = append(parts, jpPart{text: tmpl})
			break
		}
		if i > 0 {
			parts = append(parts, jpPart{text: tmpl[:i]})
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unclosed { in %q", tmpl)
		}
		expr := strings.TrimSpace(tmpl[i+1 : i+j])
		tmpl = tmpl[i+j+1:]
		if strings.HasPrefix(expr, `"`) {
			s, err := strconv.Unquote(expr)
			if err != nil {
				return nil, fmt.Errorf("literal %s: %v", expr, err)
			}
			parts = append(parts, jpPart{text: s})
			continue
		}
		steps, err := parseSteps(expr)
		if err != nil {
			return nil, err
		}
		parts = append(parts, jpPart{steps: steps, path: true})
	}
	return parts, nil
}

func parseSteps(p string) ([]jpStep, error) {
	orig := p
	p = strings.TrimPrefix(p, "$")
	var steps []jpStep
	for len(p) > 0 {
		switch p[0] {
		case '.':
			p = p[1:]
			if p == "" {
				return steps, nil // "{.}": the whole value
			}
			if p[0] == '[' {
				continue
			}
			if p[0] == '*' {
				steps, p = append(steps, jpStep{all: true}), p[1:]
				continue
			}
			n := strings.IndexAny(p, ".[")
			if n < 0 {
				n = len(p)
			}
			if n == 0 {
				return nil, fmt.Errorf("jsonpath %q: empty key", orig)
			}
			steps, p = append(steps, jpStep{key: p[:n]}), p[n:]
		case '[':
			n := strings.IndexByte(p, ']')
			if n < 0 {
				return nil, fmt.Errorf("jsonpath %q: unclosed [", orig)
			}
			in := strings.TrimSpace(p[1:n])
			p = p[n+1:]
			switch {
			case in == "*":
				steps = append(steps, jpStep{all: true})
			case len(in) >= 2 && (in[0] == '\'' || in[0] == '"') && in[len(in)-1] == in[0]:
				steps = append(steps, jpStep{key: in[1 : len(in)-1]})
			default:
				k, err := strconv.Atoi(in)
				if err != nil {
					return nil, fmt.Errorf("jsonpath %q: [%s] is not an index, * or a quoted key (filters and slices are not supported)", orig, in)
				}
				steps = append(steps, jpStep{index: k, isIdx: true})
			}
		default:
			return nil, fmt.Errorf("jsonpath %q: want .key or [...] at %q", orig, p)
		}
	}
	return steps, nil
}

func evalSteps(root any, steps []jpStep) []any {
	cur := []any{root}
	for i, s := range steps {
		var next []any
		for _, v := range cur {
			switch x := v.(type) {
			case map[string]any:
				switch {
				case s.all:
					for _, k := range sortedKeys(x) {
						next = append(next, x[k])
					}
				case s.key != "":
					if w, ok := x[s.key]; ok {
						next = append(next, w)
					}
				}
			case []any:
				switch {
				case s.all:
					next = append(next, x...)
				case s.isIdx:
					k := s.index
					if k < 0 {
						k += len(x)
					}
					if k >= 0 && k < len(x) {
						next = append(next, x[k])
					}
				case s.key == "items" && i == 0:
					next = append(next, x) // kubectl's List.items is the list
				}
			}
		}
		cur = next
	}
	return cur
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// writeJSONPath prints v (marshalled to JSON and back, so keys are the
// printed names) through the parsed template.
func writeJSONPath(w io.Writer, parts []jpPart, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var root any
	if err := json.Unmarshal(b, &root); err != nil {
		return err
	}
	var out strings.Builder
	for _, p := range parts {
		if !p.path {
			out.WriteString(p.text)
			continue
		}
		for i, m := range evalSteps(root, p.steps) {
			if i > 0 {
				out.WriteByte(' ')
			}
			if s, ok := m.(string); ok {
				out.WriteString(s)
				continue
			}
			b, _ := json.Marshal(m)
			out.Write(b)
		}
	}
	s := out.String()
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	_, err = io.WriteString(w, s)
	return err
}
