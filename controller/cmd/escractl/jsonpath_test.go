package main

import (
	"bytes"
	"testing"
)

func TestJSONPath(t *testing.T) {
	list := []any{
		map[string]any{"name": "a", "containers": []any{map[string]any{"name": "web", "replicas": 3}}},
		map[string]any{"name": "b", "containers": []any{}},
	}
	for tmpl, want := range map[string]string{
		"{.items[*].name}":                    "a b\n",
		"{[*].name}":                          "a b\n",
		"{$[0].containers[0].replicas}":       "3\n",
		"{[-1].name}":                         "b\n",
		`{[0]['name']}{"\n"}`:                 "a\n",
		"names: {.items[*].name} end":         "names: a b end\n",
		"{.items[0].containers[*].name}":      "web\n",
		"{.items[5].name}":                    "\n",
		"{.items[0].containers[0]}":           "{\"name\":\"web\",\"replicas\":3}\n",
		"{.items[*].containers[*].replicas}":  "3\n",
		"{.items[0].missing}{.items[1].name}": "b\n",
	} {
		parts, err := parseJSONPath(tmpl)
		if err != nil {
			t.Errorf("%s: %v", tmpl, err)
			continue
		}
		var b bytes.Buffer
		if err := writeJSONPath(&b, parts, list); err != nil || b.String() != want {
			t.Errorf("%s: %q, want %q (%v)", tmpl, b.String(), want, err)
		}
	}
	for _, bad := range []string{"{.items", "{.items[?(@.x)]}", "{items}", `{"unterminated}`, "{.a..b}"} {
		if _, err := parseJSONPath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
