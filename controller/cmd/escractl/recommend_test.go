package main

import (
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// An app applied with mode: recommend shows its recommendations in get
// -o wide, describe and top while its containers keep their own limits;
// applying the same spec in enforce mode is a change, and it applies them.
func TestRecommendModeShown(t *testing.T) {
	s, url := startController(t)
	ctl := []string{"--controller", url}
	const trial = "name: trial\ncpu: 2\nmemory: 1GiB\nmode: recommend\n"
	if r := runIn(t, trial, append(ctl, "apply", "-f", "-")...); r.code != 0 {
		t.Fatalf("apply: %+v", r)
	}
	d, err := simdaemon.Dial(s.TCPAddr(), "h1", 4, 8<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.Register(1, "trial", -1, 0, 10<<20)
	d.Register(2, "trial", -1, 0, 10<<20)
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Snapshot().Containers) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for range 30 {
		d.SendPeriod([]simdaemon.Stat{{Handle: 1, UsageUs: 300000}, {Handle: 2, UsageUs: 1000}})
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	r := runCLI(t, append(ctl, "get", "apps", "-o", "wide")...)
	if r.code != 0 || !strings.Contains(r.stdout, "RECOMMENDED") || !strings.Contains(r.stdout, "recommend") {
		t.Fatalf("get apps -o wide:\n%s", r.stdout)
	}
	// Σ recommendations: the whole 2 cores (busy 1 takes what idle 2 gives up).
	if !strings.Contains(r.stdout, "2.00/") {
		t.Errorf("get apps -o wide lacks the 2-core recommendation:\n%s", r.stdout)
	}
	r = runCLI(t, append(ctl, "describe", "trial")...)
	if r.code != 0 || !strings.Contains(r.stdout, "Mode:        recommend:") || !strings.Contains(r.stdout, "REC CPU/MEM") {
		t.Fatalf("describe:\n%s", r.stdout)
	}
	if r := runCLI(t, append(ctl, "top", "trial", "--once")...); !strings.Contains(r.stdout, "REC CPU/MEM") {
		t.Fatalf("top:\n%s", r.stdout)
	}
	if c, _ := d.Container(1); c.QuotaUs != -1 {
		t.Fatalf("recommend mode set a quota of %d µs", c.QuotaUs)
	}
	enforce := strings.Replace(trial, "mode: recommend\n", "", 1)
	if r := runIn(t, enforce, append(ctl, "apply", "-f", "-")...); r.code != 0 || strings.Contains(r.stdout, "unchanged") {
		t.Fatalf("apply in enforce mode: %+v", r)
	}
	for time.Now().Before(deadline.Add(5 * time.Second)) {
		if c, _ := d.Container(1); c.QuotaUs > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c, _ := d.Container(1); c.QuotaUs < 150000 {
		t.Fatalf("enforce applied %d µs to the busy container, want its recommendation", c.QuotaUs)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "-o", "wide")...); !strings.Contains(r.stdout, "enforce") {
		t.Fatalf("after enforce:\n%s", r.stdout)
	}
}

// apply --dry-run names a change of mode or of a maximum.
func TestPlanNamesModeAndMaxima(t *testing.T) {
	cur := spec.Doc{Name: "a", CPU: "1", Memory: "1GiB", Containers: []spec.DocContainer{{Name: "web", Image: "i", Replicas: 2}}}
	want := cur
	want.Mode = spec.ModeRecommend
	want.Containers = []spec.DocContainer{{Name: "web", Image: "i", Replicas: 2, MaxCPU: "0.5"}}
	got := strings.Join(planLines(cur, want), "\n")
	if got != "max web: cpu none → 0.5, memory none → none (running replicas kept)\nmode enforce → recommend" {
		t.Fatalf("plan:\n%s", got)
	}
}
