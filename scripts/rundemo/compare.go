package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// compare puts the static split's pass beside Escra's: the static pass's
// keys go into Escra's summary.json with a static_ prefix, and both are
// printed as one table. The static split is the app's bootstrap share
// (Escra §IV-A eq. 2: the budget split equally over the replicas) held for
// the whole load, which is what the same spec gives in recommend mode.
func compare(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	escraDir := fs.String("escra", "results/run", "directory of the Escra pass's summary.json (written back)")
	staticDir := fs.String("static", "results/run/static", "directory of the static split's summary.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ep := filepath.Join(*escraDir, "summary.json")
	e, err := readFlat(ep)
	if err != nil {
		return err
	}
	s, err := readFlat(filepath.Join(*staticDir, "summary.json"))
	if err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		e["static_"+k] = s[k]
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(ep, append(b, '\n'), 0o644); err != nil {
		return err
	}
	rows := []struct{ label, key, unit string }{
		{"load", "load_seconds", "s"},
		{"requests ok", "successes", ""},
		{"latency p50", "latency_p50_ms", "ms"},
		{"latency p99", "latency_p99_ms", "ms"},
		{"throttled periods", "cgroup_throttled_periods", ""},
		{"CPU slack p50", "cpu_slack_p50_cores", "cores"},
		{"CPU slack p99", "cpu_slack_p99_cores", "cores"},
		{"OOM kills", "oom_kills", ""},
	}
	fmt.Printf("  %-20s %14s %14s\n", "", "Escra", "static split")
	for _, r := range rows {
		fmt.Printf("  %-20s %14s %14s\n", r.label, cell(e[r.key], r.unit), cell(s[r.key], r.unit))
	}
	fmt.Printf("  %-20s %14s %14s\n", "OOM grants", cell(e["oom_grants"], ""), "-")
	return nil
}

func readFlat(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func cell(v any, unit string) string {
	if v == nil {
		return "?"
	}
	s := fmt.Sprint(v)
	if unit != "" {
		s += " " + unit
	}
	return s
}
