package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// ruleFile is the part of Prometheus' rule file format the shipped rules use.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exportedMetrics collects the metric names the product defines: the
// string literals starting escra_ or escrad_ in the non-test Go files of
// the daemon, the controller and internal/ (Name: fields, NewDesc names).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	lit := regexp.MustCompile(`"(escrad?_[a-z_]+)"`)
	have := map[string]bool{"up": true} // Prometheus' own, per target
	for _, dir := range []string{"daemon", "controller", "internal"} {
		err := filepath.WalkDir(filepath.Join("../../..", dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
				have[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return have
}

var metricRE = regexp.MustCompile(`\b(escrad?_[a-z_]+|up)\b`)

// unknownMetrics lists the escra series an expression names that the code
// does not define (a histogram's _bucket, _sum and _count count as it).
func unknownMetrics(expr string, have map[string]bool) []string {
	var bad []string
	for _, n := range metricRE.FindAllString(expr, -1) {
		base := n
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, s)
		}
		if !have[n] && !have[base] {
			bad = append(bad, n)
		}
	}
	return bad
}

// TestAlertRules parses the shipped rules and checks each one: a name, an
// expression with balanced brackets naming only metrics the code exports,
// a valid for:, a severity and a summary.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("../../prometheus/escra-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("escra-alerts.yml: %v", err)
	}
	have := exportedMetrics(t)
	if unknownMetrics(`rate(escra_nope_total[5m])`, have) == nil || unknownMetrics(`escrad_oom_rescue_seconds_bucket`, have) != nil {
		t.Fatal("the metric name check cannot tell known from unknown names")
	}
	names := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || names[r.Alert] {
				t.Errorf("rule %q: missing or repeated alert name", r.Alert)
			}
			names[r.Alert] = true
			if bad := unknownMetrics(r.Expr, have); len(bad) > 0 {
				t.Errorf("%s: expr names %v, which no component exports", r.Alert, bad)
			}
			if !metricRE.MatchString(r.Expr) {
				t.Errorf("%s: expr %q names no metric", r.Alert, r.Expr)
			}
			for _, pair := range []string{"()", "[]", "{}"} {
				if strings.Count(r.Expr, pair[:1]) != strings.Count(r.Expr, pair[1:]) {
					t.Errorf("%s: unbalanced %s in %q", r.Alert, pair, r.Expr)
				}
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: wants labels.severity and annotations.summary", r.Alert)
			}
		}
	}
	for _, want := range []string{"EscradDown", "EscraControllerNoLeader", "EscraOOMRescueDenied", "EscraCPUBudgetExceeded", "EscraMemoryBudgetExceeded", "EscraCertificateExpiresSoon"} {
		if !names[want] {
			t.Errorf("no %s rule", want)
		}
	}
}

// TestDashboardQueries: every query of the shipped dashboard names only
// metrics a component exports.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile("../../grafana/escra-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	have := exportedMetrics(t)
	for _, m := range regexp.MustCompile(`"(?:expr|query)":\s*"((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(b), -1) {
		if bad := unknownMetrics(m[1], have); len(bad) > 0 {
			t.Errorf("dashboard query %q names %v, which no component exports", m[1], bad)
		}
	}
}
