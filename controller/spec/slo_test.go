package spec

import (
	"strings"
	"testing"
	"time"
)

const pemaSpec = `name: shop
cpu: 1.5
memory: 512MiB
allocator:
  policy: pema
slo:
  p95: 50ms
  interval: 20s
  listen: 127.0.0.1:18080
  upstream: 127.0.0.1:18081
  ranges: [0, 200, 400]
  range_width: 50
containers:
  - name: web
    image: x
`

func TestSLO(t *testing.T) {
	a, err := Parse("s.yaml", []byte(pemaSpec))
	if err != nil {
		t.Fatal(err)
	}
	if a.SLO == nil || a.SLO.P95 != 50*time.Millisecond || a.SLO.Interval != 20*time.Second ||
		len(a.SLO.Ranges) != 3 || a.SLO.RangeWidth != 50 || a.Allocator.Policy != "pema" {
		t.Fatalf("%+v", a.SLO)
	}
	// pema-guarded takes the same section, and needs it as much.
	g, err := Parse("s.yaml", []byte(strings.Replace(pemaSpec, "policy: pema", "policy: pema-guarded", 1)))
	if err != nil || g.Allocator.Policy != "pema-guarded" || g.SLO == nil {
		t.Fatalf("pema-guarded: %v, %+v", err, g)
	}
	i, j := strings.Index(pemaSpec, "slo:"), strings.Index(pemaSpec, "containers:")
	noSLO := strings.Replace(pemaSpec[:i]+pemaSpec[j:], "policy: pema", "policy: pema-guarded", 1)
	if _, err := Parse("s.yaml", []byte(noSLO)); err == nil || !strings.Contains(err.Error(), "is required by policy pema-guarded") {
		t.Fatalf("pema-guarded without an slo: err %v", err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"slo:\n  p95: 50ms\n", "", "slo: is required by policy pema"},
		{"p95: 50ms", "p95: -1s", "slo p95"},
		{"p95: 50ms", "p95: fast", "not a duration"},
		{"[0, 200, 400]", "[0, 400, 200]", "increasing"},
		{"  range_width: 50\n", "  exploration: lots\n", "exploration"},
		{"  listen: 127.0.0.1:18080\n", "", "listen and upstream"},
	} {
		src := pemaSpec
		if c.from == "slo:\n  p95: 50ms\n" {
			i := strings.Index(src, "slo:")
			j := strings.Index(src, "containers:")
			src = src[:i] + src[j:]
		} else {
			src = strings.Replace(src, c.from, c.to, 1)
		}
		_, err := Parse("s.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q → %q: err %v, want %q", c.from, c.to, err, c.want)
		}
	}
}
