package spec

import (
	"strings"
	"testing"
)

func TestModeAndMaxima(t *testing.T) {
	a, err := Parse("m.yaml", []byte(`name: shop
cpu: 2
memory: 1GiB
mode: recommend
containers:
- {name: web, image: i, replicas: 2, max_cpu: 300m, max_memory: 128MiB}
- {name: db, image: i}
`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != ModeRecommend {
		t.Fatalf("mode %q", a.Mode)
	}
	web, db := &a.Containers[0], &a.Containers[1]
	if web.MaxCPU != 0.3 || web.MaxBytes != 128<<20 || db.MaxCPU != 0 || db.MaxBytes != 0 {
		t.Fatalf("maxima: web %g/%d db %g/%d", web.MaxCPU, web.MaxBytes, db.MaxCPU, db.MaxBytes)
	}
	// Bootstrap (eq. 2) would give each of three replicas 2/3 core and
	// (1-σ)·1GiB/3; web is capped, db is not.
	if c, m := a.Bootstrap(web); c != 0.3 || m != 128<<20 {
		t.Fatalf("web bootstrap %g cores %d bytes, want the maxima", c, m)
	}
	if c, _ := a.Bootstrap(db); c < 0.66 {
		t.Fatalf("db bootstrap %g cores", c)
	}
	// The document round-trips and tells the modes apart.
	d := a.Doc()
	if d.Mode != ModeRecommend || d.Containers[0].MaxCPU != "0.3" || d.Containers[0].MaxMemory != "128MiB" {
		t.Fatalf("doc %+v", d)
	}
	b, err := Parse("e.yaml", []byte("name: shop\ncpu: 2\nmemory: 1GiB\ncontainers:\n- {name: web, image: i, replicas: 2, max_cpu: 300m, max_memory: 128MiB}\n- {name: db, image: i}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Mode != ModeEnforce || b.Doc().Mode != "" {
		t.Fatalf("default mode %q, doc %q", b.Mode, b.Doc().Mode)
	}
	if d.Equal(b.Doc()) {
		t.Fatal("a recommend and an enforce spec compare equal: apply would call the switch unchanged")
	}
	// A new maximum is a change, but not one that replaces containers.
	c2 := d.Containers[0]
	c2.MaxCPU = "0.5"
	if c2.Equal(d.Containers[0]) || !c2.Template(d.Containers[0]) {
		t.Fatal("max_cpu must change the spec but not the containers")
	}
}

func TestModeAndMaximaErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"mode: off\n", `b.yaml:4: mode: "off" must be enforce (apply the allocator's limits) or recommend (only show them)`},
		{"containers: [{name: w, image: i, min_cpu: 500m, max_cpu: 200m}]\n", "b.yaml:4: containers[0].max_cpu: 0.2 cores is below its min_cpu of 0.5"},
		{"containers: [{name: w, image: i, max_cpu: 5m}]\n", "b.yaml:4: containers[0].max_cpu: 0.005 cores is below the allocator's cpu_floor of 0.02"},
		{"containers: [{name: w, image: i, max_cpu: 0}]\n", "b.yaml:4: containers[0].max_cpu: must be above 0 cores (leave it out for no cap)"},
		{"containers: [{name: w, image: i, min_memory: 64MiB, max_memory: 32MiB}]\n", "b.yaml:4: containers[0].max_memory: 32MiB is below its min_memory of 64MiB"},
		{"containers: [{name: w, image: i, max_memory: 1MiB}]\n", "b.yaml:4: containers[0].max_memory: must be at least 4MiB (leave it out for no cap)"},
	} {
		_, err := Parse("b.yaml", []byte("name: a\ncpu: 1\nmemory: 1GiB\n"+tc.yaml))
		if err == nil {
			t.Errorf("%q: accepted", tc.yaml)
			continue
		}
		if got := err.Error(); got != tc.want || strings.Contains(got, "\n") {
			t.Errorf("%q:\n got %s\nwant %s", tc.yaml, got, tc.want)
		}
	}
}
