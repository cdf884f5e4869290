package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompareAddsTheStaticSplitBesideEscra(t *testing.T) {
	dir := t.TempDir()
	escra, static := filepath.Join(dir, "escra"), filepath.Join(dir, "static")
	for d, body := range map[string]string{
		escra:  `{"latency_p99_ms": 40.5, "cgroup_throttled_periods": 12, "oom_grants": 3}`,
		static: `{"latency_p99_ms": 91.25, "cgroup_throttled_periods": 480}`,
	} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "summary.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := compare([]string{"-escra", escra, "-static", static}); err != nil {
		t.Fatal(err)
	}
	got, err := readFlat(filepath.Join(escra, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"latency_p99_ms": 40.5, "static_latency_p99_ms": 91.25,
		"cgroup_throttled_periods": 12, "static_cgroup_throttled_periods": 480, "oom_grants": 3}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["static_oom_grants"]; ok {
		t.Error("a key the static pass did not write appeared with the static_ prefix")
	}
}

func TestCompareRefusesAMissingPass(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := compare([]string{"-escra", dir, "-static", filepath.Join(dir, "absent")}); err == nil {
		t.Fatal("compare without the static pass's summary succeeded")
	}
}

func TestReadKeyFindsTheCounter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.stat")
	if err := os.WriteFile(p, []byte("nr_periods 100\nnr_throttled 7\nthrottled_time 123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := readKey(p, "nr_throttled"); !ok || n != 7 {
		t.Fatalf("readKey = %d, %v; want 7, true", n, ok)
	}
	if _, ok := readKey(p, "nr_burst"); ok {
		t.Fatal("readKey found a key that is not there")
	}
}
