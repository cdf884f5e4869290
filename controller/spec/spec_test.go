package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
)

func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../docs/examples/*.yaml")
	if len(files) < 2 {
		t.Fatalf("expected example specs in docs/examples, found %d", len(files))
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestShopExample(t *testing.T) {
	a, err := Load("../../docs/examples/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "shop" || a.CPU != 2 || a.MemoryBytes != 1536<<20 || a.Sigma != 0.1 {
		t.Fatalf("top level: %+v", a)
	}
	if a.Replicas() != 4 || len(a.Containers) != 2 {
		t.Fatalf("replicas %d containers %d", a.Replicas(), len(a.Containers))
	}
	web := a.Containers[0]
	if web.MinCPU != 0.1 || web.MinBytes != 64<<20 || web.Network != "host" || web.Env["GOMAXPROCS"] != "2" {
		t.Fatalf("web: %+v", web)
	}
	if got := strings.Join(web.Command, " "); got != "/escra-demo serve --listen 127.0.0.1:0" {
		t.Fatalf("command %q", got)
	}
	if a.Containers[1].Host != "h2" || a.Containers[1].Network != "none" {
		t.Fatalf("cache: %+v", a.Containers[1])
	}
	// Bootstrap (Escra §IV-A eq. 2): the whole CPU limit and memory less σ
	// are handed out, minimums first.
	var cpu float64
	var mem int64
	for i := range a.Containers {
		c := &a.Containers[i]
		cc, mm := a.Bootstrap(c)
		if cc < c.MinCPU || mm < c.MinBytes {
			t.Errorf("%s bootstrap %g/%d below minimum", c.Name, cc, mm)
		}
		cpu += cc * float64(c.Replicas)
		mem += mm * int64(c.Replicas)
	}
	if cpu < 1.999 || cpu > 2.001 {
		t.Errorf("bootstrap CPU sums to %g, want 2", cpu)
	}
	wantMem := int64(float64(a.MemoryBytes) * 0.9)
	if mem > wantMem || mem < wantMem-8 {
		t.Errorf("bootstrap memory sums to %d, want %d (σ withheld)", mem, wantMem)
	}
}

func TestDefaults(t *testing.T) {
	a, err := Parse("d.yaml", []byte("name: a\ncpu: 500m\nmemory: 100MB\ncontainers:\n- {name: x, image: i}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Allocator{Policy: "escra", Kappa: 0.8, Gamma: 0.2, Upsilon: 20, Window: 10,
		Period: 100 * time.Millisecond, ReclaimMarginBytes: 50 << 20,
		CPUFloor: 0.02, OOMStepBytes: 64 << 20, Headroom: 0.1}
	if !reflect.DeepEqual(a.Allocator, want) {
		t.Fatalf("allocator defaults %+v, want %+v", a.Allocator, want)
	}
	// The spec's defaults are the controller's built-in ones (the CPU
	// floor was 5 ms here while the allocator's moved to 2 ms).
	p := allocator.DefaultParams()
	if p.Kappa != want.Kappa || p.Gamma != want.Gamma || p.Upsilon != want.Upsilon || p.Window != want.Window ||
		p.Period != want.Period || p.SafeMarginBytes != want.ReclaimMarginBytes || p.Headroom != want.Headroom ||
		p.CPUFloorUs != int64(want.CPUFloor*float64(want.Period.Microseconds())) || p.OOMStepBytes != want.OOMStepBytes {
		t.Errorf("spec defaults %+v differ from allocator.DefaultParams %+v", want, p)
	}
	if a.CPU != 0.5 || a.MemoryBytes != 100e6 || a.Sigma != DefaultSigma || a.Containers[0].Replicas != 1 {
		t.Fatalf("%+v", a)
	}
}

const good = `name: shop
cpu: 2
memory: 1GiB
containers:
  - name: web
    image: img
    replicas: 2
  - name: db
    image: img
`

// Every user mistake ends in one error naming file, line and field.
func TestErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"bad yaml", "name: [a\n", "app.yaml:1: invalid YAML: did not find expected"},
		{"tab indent", "name: a\n\tcpu: 1\n", "app.yaml:2: invalid YAML:"},
		{"empty", "", "app.yaml: is empty"},
		{"comment only", "# nothing\n", "app.yaml: is empty"},
		{"list doc", "- a\n", "app.yaml:1: must be a mapping of fields"},
		{"two docs", good + "---\nname: b\n", "app.yaml:10: holds more than one YAML document"},
		{"labels not a mapping", good + "labels: web\n", "app.yaml:10: labels: must be a mapping of key: value"},
		{"bad label key", good + "labels:\n  \"team web\": a\n", "app.yaml:11: labels: keys must be"},
		{"bad label value", good + "labels:\n  team: \"a/b\"\n", "app.yaml:11: labels.team: must be up to 63"},
		{"unknown top", good + "cpus: 3\n", "app.yaml:10: cpus: unknown field (known: allocator, containers, cpu, labels, memory, mode, name, sigma, slo)"},
		{"unknown container field", strings.Replace(good, "    replicas: 2", "    replica: 2", 1), "app.yaml:7: containers[0].replica: unknown field"},
		{"replicas zero", strings.Replace(good, "  - name: db\n    image: img\n", "  - name: db\n    image: img\n    replicas: 0\n", 1), "app.yaml:10: containers[1].replicas: 0 must be ≥ 1"},
		{"replicas text", strings.Replace(good, "replicas: 2", "replicas: two", 1), "app.yaml:7: containers[0].replicas: \"two\" is not a whole number"},
		{"replicas quoted", strings.Replace(good, "replicas: 2", `replicas: "2"`, 1), "app.yaml:7: containers[0].replicas: \"2\" is not a whole number"},
		{"missing name", strings.Replace(good, "name: shop\n", "", 1), "app.yaml:1: name: is required"},
		{"missing cpu", strings.Replace(good, "cpu: 2\n", "", 1), "app.yaml:1: cpu: is required"},
		{"missing memory", strings.Replace(good, "memory: 1GiB\n", "", 1), "app.yaml:1: memory: is required"},
		{"empty containers", "name: a\ncpu: 1\nmemory: 1GiB\ncontainers: []\n", "app.yaml:4: containers: must list at least one container"},
		{"empty containers", "name: a\ncpu: 1\nmemory: 1GiB\ncontainers: []\n", "app.yaml:4: containers: must list at least one container"},
		{"containers mapping", "name: a\ncpu: 1\nmemory: 1GiB\ncontainers: {web: 1}\n", "app.yaml:4: containers: must be a list of containers, not a mapping"},
		{"missing image", strings.Replace(good, "  - name: db\n    image: img\n", "  - name: db\n", 1), "app.yaml:8: containers[1].image: is required"},
		{"bad app name", strings.Replace(good, "name: shop", "name: Shop_1", 1), "app.yaml:1: name: \"Shop_1\" must be"},
		{"dup container", strings.Replace(good, "name: db", "name: web", 1), "app.yaml:8: containers[1].name: \"web\" is already used by containers[0]"},
		{"dup key", good + "cpu: 3\n", "app.yaml:10: cpu: given twice (first on line 2)"},
		{"bad memory", strings.Replace(good, "1GiB", "lots", 1), "app.yaml:3: memory: \"lots\" is not a memory quantity"},
		{"docker memory", strings.Replace(good, "1GiB", "512m", 1), "app.yaml:3: memory: \"512m\" is not a memory quantity (write units as MiB"},
		{"negative memory", strings.Replace(good, "1GiB", "-1GiB", 1), "app.yaml:3: memory: \"-1GiB\" is negative"},
		{"tiny memory", strings.Replace(good, "1GiB", "1KiB", 1), "app.yaml:3: memory: must be at least 4MiB"},
		{"zero cpu", strings.Replace(good, "cpu: 2", "cpu: 0", 1), "app.yaml:2: cpu: must be above 0 cores"},
		{"cpu list", strings.Replace(good, "cpu: 2", "cpu: [2]", 1), "app.yaml:2: cpu: must be a CPU quantity in cores, not a list"},
		{"sigma range", good + "sigma: 1\n", "app.yaml:10: sigma: 1 must be in [0, 1)"},
		{"sigma text", good + "sigma: \"0.1\"\n", "app.yaml:10: sigma: \"0.1\" is not a number"},
		{"kappa range", good + "allocator:\n  kappa: 2\n", "app.yaml:11: allocator.kappa: 2 must be above 0 and at most 1"},
		{"headroom range", good + "allocator:\n  headroom: -0.1\n", "app.yaml:11: allocator.headroom: -0.1 must be between 0 and 10"},
		{"allocator unknown", good + "allocator:\n  kapa: 0.5\n", "app.yaml:11: allocator.kapa: unknown field"},
		{"policy", good + "allocator:\n  policy: pema2\n", "app.yaml:11: allocator.policy: \"pema2\" is not a known policy"},
		{"gamma one", good + "allocator:\n  gamma: 1\n", "app.yaml:11: allocator.gamma: 1 must be in [0, 1)"},
		{"cpu floor", good + "allocator:\n  cpu_floor: 2\n", "app.yaml:11: allocator.cpu_floor: 2 must be between 10m and 1 core"},
		{"oom step", good + "allocator:\n  oom_step: 1B\n", "app.yaml:11: allocator.oom_step: must be at least 4KiB"},
		{"window", good + "allocator:\n  window: 0\n", "app.yaml:11: allocator.window: 0 must be between 1 and 1000"},
		{"period", good + "allocator:\n  period: 100\n", "app.yaml:11: allocator.period: \"100\" is not a duration"},
		{"env list", strings.Replace(good, "    replicas: 2\n", "    env: [A=1]\n", 1), "app.yaml:7: containers[0].env: must be a mapping of NAME: value"},
		{"env name", strings.Replace(good, "    replicas: 2\n", "    env: {1A: x}\n", 1), "app.yaml:7: containers[0].env: variable names"},
		{"command string", strings.Replace(good, "    replicas: 2\n", "    command: /app serve\n", 1), "app.yaml:7: containers[0].command: must be a list of strings"},
		{"network", strings.Replace(good, "    replicas: 2\n", "    network: bridge\n", 1), "app.yaml:7: containers[0].network: \"bridge\" must be none or host"},
		{"host", strings.Replace(good, "    replicas: 2\n", "    host: \"a b\"\n", 1), "app.yaml:7: containers[0].host: \"a b\" is not a host id"},
		{"null field", strings.Replace(good, "image: img\n    replicas", "image:\n    replicas", 1), "app.yaml:6: containers[0].image: must be a string, not empty"},
		{"min above limit", strings.Replace(good, "    replicas: 2\n", "    min_memory: 2GiB\n", 1), "app.yaml:5: containers[0].min_memory: 2GiB is above the app's memory limit of 1GiB"},
		{"impossible cpu budget", strings.Replace(good, "    replicas: 2\n", "    replicas: 3\n    min_cpu: 700m\n", 1), "app.yaml:2: cpu: the containers' min_cpu × replicas add up to 2.1 cores, above the limit of 2"},
		{"impossible memory budget", strings.Replace(good, "    replicas: 2\n", "    replicas: 3\n    min_memory: 400MiB\n", 1), "app.yaml:3: memory: the containers' min_memory × replicas add up to 1.2GiB, above the limit of 1GiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("app.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.want) {
				t.Fatalf("error\n  %s\nwant prefix\n  %s", msg, tc.want)
			}
			if strings.Contains(msg, "\n") {
				t.Fatalf("error spans lines: %q", msg)
			}
		})
	}
}

func TestAllErrorsCollected(t *testing.T) {
	_, err := Parse("a.yaml", []byte("name: a\ncpu: 1\nmemory: 1GiB\nfoo: 1\nbar: 2\ncontainers: [{name: x, image: y}]\n"))
	es, ok := err.(Errors)
	if !ok || len(es) != 2 || es[0].Line != 4 || es[1].Line != 5 {
		t.Fatalf("want two errors on lines 4 and 5, got %#v", err)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "a.yaml:5: bar: unknown field") {
		t.Fatalf("message %q", err.Error())
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.HasSuffix(err.Error(), "nope.yaml: no such file or directory") {
		t.Fatalf("got %v", err)
	}
}

func TestLoadNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "my-app.yaml")
	os.WriteFile(p, []byte(good+"extra: 1\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), "my-app.yaml:10: extra: unknown field") {
		t.Fatalf("got %v", err)
	}
}

func TestAliases(t *testing.T) {
	y := "name: a\ncpu: 1\nmemory: 1GiB\ncontainers:\n- &w {name: x, image: y, env: &e {A: b}}\n- {name: z, image: y, env: *e}\n"
	a, err := Parse("a.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if a.Containers[1].Env["A"] != "b" {
		t.Fatalf("alias not followed: %+v", a.Containers[1])
	}
}

func TestQuantities(t *testing.T) {
	bytesOK := map[string]int64{"1048576": 1 << 20, "512MiB": 512 << 20, "2GiB": 2 << 30, "1.5Gi": 3 << 29,
		"100MB": 100e6, "1K": 1000, "4KiB": 4096, "10B": 10, "0": 0}
	for s, want := range bytesOK {
		if got, err := ParseBytes(s); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "x", "1.5B", "-1", "1e30", "NaN", "Inf", "5 potatoes", "1mib"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
	cpuOK := map[string]float64{"2": 2, "0.5": 0.5, "500m": 0.5, "1500m": 1.5}
	for s, want := range cpuOK {
		if got, err := ParseCPU(s); err != nil || got != want {
			t.Errorf("ParseCPU(%q) = %g, %v; want %g", s, got, err, want)
		}
	}
	for _, s := range []string{"", "m", "two", "-1", "1e9", "NaN"} {
		if _, err := ParseCPU(s); err == nil {
			t.Errorf("ParseCPU(%q) accepted", s)
		}
	}
	for b, want := range map[int64]string{0: "0B", 1023: "1023B", 1 << 20: "1MiB", 3 << 29: "1.5GiB", 50 << 20: "50MiB"} {
		if got := FormatBytes(b); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", b, got, want)
		}
	}
}

// Labels are read, kept in the canonical document and compared.
func TestLabels(t *testing.T) {
	a, err := Parse("app.yaml", []byte("name: shop\ncpu: 1\nmemory: 64MiB\nlabels:\n  team: web\n  example.com/tier: front\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := a.Doc()
	if d.Labels["team"] != "web" || d.Labels["example.com/tier"] != "front" || len(d.Labels) != 2 {
		t.Fatalf("labels %v", d.Labels)
	}
	o := a.Doc()
	o.Labels = map[string]string{"team": "db"}
	if d.Equal(o) {
		t.Fatal("documents with other labels are equal")
	}
}
