package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParse: no input panics, hangs or yields an app that breaks the
// invariants the controller relies on; every problem is one line that
// starts with the file name; an accepted app printed as its Doc parses
// back to the same Doc (get -o yaml | apply -f - is a no-op).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../docs/examples/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(good))
	f.Add([]byte("name: a\ncpu: 1\nmemory: 1GiB\ncontainers:\n- &w {name: x, image: y}\n- *w\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Parse("f.yaml", data)
		if err != nil {
			for _, msg := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(msg, "f.yaml") {
					t.Fatalf("bad error message %q", msg)
				}
			}
			return
		}
		y, err := yaml.Marshal(a.Doc())
		if err != nil {
			t.Fatal(err)
		}
		b, err := Parse("doc.yaml", y)
		if err != nil || !b.Doc().Equal(a.Doc()) {
			t.Fatalf("the Doc does not parse back: %v\n%s", err, y)
		}
		if a.Name == "" || a.CPU <= 0 || a.MemoryBytes <= 0 {
			t.Fatalf("accepted an incomplete app: %+v", a)
		}
		if a.Sigma < 0 || a.Sigma >= 1 {
			t.Fatalf("sigma %g", a.Sigma)
		}
		var minCPU float64
		var minMem int64
		for i := range a.Containers {
			c := &a.Containers[i]
			if c.Replicas < 1 || c.Name == "" || c.Image == "" {
				t.Fatalf("bad container %+v", c)
			}
			minCPU += c.MinCPU * float64(c.Replicas)
			minMem += c.MinBytes * int64(c.Replicas)
			cpu, mem := a.Bootstrap(c)
			if cpu < 0 || mem < 0 {
				t.Fatalf("negative bootstrap %g %d", cpu, mem)
			}
		}
		if minCPU > a.CPU+1e-9 || minMem > a.MemoryBytes {
			t.Fatalf("accepted an impossible budget")
		}
	})
}
