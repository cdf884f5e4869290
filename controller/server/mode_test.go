package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/internal/simdaemon"
)

// An app in recommend mode sends its daemons no limit while its
// recommendations (capped by max_cpu) show in the status and the
// metrics; defining it again in enforce mode applies them.
func TestRecommendModeAppliesNothingUntilEnforced(t *testing.T) {
	s := start(t, nil)
	spec := AppSpec{Name: "trial", CPUCores: 2, MemoryBytes: 1 << 30, Mode: "recommend",
		Maxima: []Max{{Container: "c1", CPUCores: 1.5}}}
	if err := s.DefineApp(spec); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s, "h1", 4)
	d.Register(1, "trial", -1, 0, 10*mib)
	d.Register(2, "trial", -1, 0, 10*mib)
	eventually(t, "two members", func() bool { return len(s.Snapshot().Containers) == 2 })
	for range 40 {
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 300000}, {Handle: 2, UsageUs: 1000}})
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "busy c1 recommended its 1.5-core cap", func() bool {
		c, _ := container(s, "trial", 1)
		return c.RecommendedCPUCores == 1.5 && c.MaxCPUCores == 1.5 && c.RecommendedMemoryBytes > 0
	})
	for _, h := range []uint32{1, 2} {
		if c, _ := d.Container(h); c.QuotaUs != -1 || c.MemLimit != 0 {
			t.Fatalf("container %d got limits %d µs %d B in recommend mode", h, c.QuotaUs, c.MemLimit)
		}
	}
	if a := s.Snapshot().Apps[0]; a.Mode != "recommend" {
		t.Fatalf("mode %q", a.Mode)
	}
	resp, err := http.Get("http://" + s.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`escra_app_recommend_mode{app="trial"} 1`,
		`escra_container_recommended_cpu_cores{app="trial",container="h1-c1",host="h1"} 1.5`,
		`escra_container_recommended_memory_bytes{app="trial",container="h1-c2",host="h1"}`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %s", want)
		}
	}

	spec.Mode = ""
	if err := s.DefineApp(spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the recommendations applied", func() bool {
		c1, _ := d.Container(1)
		c2, _ := d.Container(2)
		return c1.QuotaUs == 150000 && c2.QuotaUs > 0 && c2.QuotaUs < 50000
	})
	if c, _ := container(s, "trial", 1); c.RecommendedCPUCores != 0 || c.CPUQuotaUs != 150000 {
		t.Fatalf("enforced status %+v", c)
	}
}
