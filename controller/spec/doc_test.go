package spec

import (
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// A spec printed as a Doc (YAML or JSON) parses back to the same Doc: what
// escractl get apps -o yaml|json prints applies back unchanged.
func TestDocRoundTrip(t *testing.T) {
	for _, f := range []string{"shop", "minimal", "batch", "pema"} {
		a, err := Load("../../docs/examples/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		d := a.Doc()
		y, err := yaml.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		for form, data := range map[string][]byte{"yaml": y, "json": j} {
			b, err := Parse(f+"."+form, data)
			if err != nil {
				t.Fatalf("%s as %s does not parse back: %v\n%s", f, form, err, data)
			}
			if !b.Doc().Equal(d) {
				t.Errorf("%s as %s changed:\n%+v\n%+v", f, form, b.Doc(), d)
			}
			if b.CPU != a.CPU || b.MemoryBytes != a.MemoryBytes || b.Replicas() != a.Replicas() {
				t.Errorf("%s as %s: values changed", f, form)
			}
		}
	}
}

func TestFormatBytesExact(t *testing.T) {
	for _, b := range []int64{1, 1000, 1024, 1536 << 20, 64 << 20, 50 << 20, 3<<30 + 1, 1<<40 + 1<<39, 4096, 123456789} {
		s := FormatBytesExact(b)
		if n, err := ParseBytes(s); err != nil || n != b {
			t.Errorf("%d -> %q -> %d, %v", b, s, n, err)
		}
	}
	if s := FormatBytesExact(1536 << 20); s != "1.5GiB" {
		t.Errorf("1.5 GiB written %q", s)
	}
	for _, c := range []float64{0.1, 1.2, 2, 0.333, 1e-3} {
		if v, err := ParseCPU(FormatCPU(c)); err != nil || v != c {
			t.Errorf("cpu %g -> %q -> %g", c, FormatCPU(c), v)
		}
	}
}

func TestParseAll(t *testing.T) {
	stream := "name: a\ncpu: 1\nmemory: 1GiB\n---\n- {name: b, cpu: 500m, memory: 256MiB, status: {members: 2}}\n- {name: c, cpu: 1, memory: 1GiB, containers: [{name: x, image: y, replicas: 2}]}\n---\n"
	apps, err := ParseAll("s.yaml", []byte(stream))
	if err != nil || len(apps) != 3 || apps[0].Name != "a" || apps[1].CPU != 0.5 || apps[2].Replicas() != 2 || len(apps[0].Containers) != 0 {
		t.Fatalf("%v %+v", err, apps)
	}
	// Every problem of every app, one a line.
	_, err = ParseAll("s.yaml", []byte("name: A\ncpu: 1\nmemory: 1GiB\n---\nname: b\ncpu: -1\nmemory: 1\nfoo: 1\n---\nname: a\ncpu: 1\n"))
	lines := strings.Split(err.Error(), "\n")
	want := []string{"s.yaml:1: name: \"A\" must be", "s.yaml:6: cpu:", "s.yaml:8: foo: unknown field", "s.yaml:10: memory: is required"}
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d: %q, want prefix %q", i, lines[i], w)
		}
	}
	if _, err := ParseAll("s.yaml", []byte("- {name: a, cpu: 1, memory: 1GiB}\n- {name: a, cpu: 2, memory: 1GiB}\n")); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("duplicate app: %v", err)
	}
	if _, err := ParseAll("s.yaml", []byte("---\n")); err == nil {
		t.Errorf("empty stream accepted")
	}
}
