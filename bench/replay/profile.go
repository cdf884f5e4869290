package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// Profile is one cell's profiling run as bench-run writes it to
// profiles.json (a JSON array of these): per container, CPU usage in cores
// and memory in bytes, one sample per 100 ms, without limits. Peaks are
// the matrix's (Peak1s and the largest memory sample); the replay
// recomputes what it needs from CPU.
type Profile struct {
	Workload string
	Load     string
	Peaks    []struct{ CPU, Mem float64 } `json:",omitempty"`
	CPU      [][]float64
	Mem      [][]float64 `json:",omitempty"`
}

// Cell names the profile as the report does.
func (p Profile) Cell() string { return p.Workload + "/" + p.Load }

// ReadProfiles reads a profiles.json.
func ReadProfiles(path string) ([]Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ps []Profile
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range ps {
		if len(p.CPU) == 0 {
			return nil, fmt.Errorf("%s: %s has no CPU series", path, p.Cell())
		}
		for i, s := range p.CPU {
			if len(s) < SamplesPerSecond {
				return nil, fmt.Errorf("%s: %s container %d has %d samples, want at least 1 s", path, p.Cell(), i, len(s))
			}
		}
	}
	return ps, nil
}

// WriteProfiles writes profiles in the same format.
func WriteProfiles(path string, ps []Profile) error {
	b, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Limits are rule r's limits (cores) for the profile's containers, at
// least 0.01 and capped at the app's CPUs, as the matrix caps them.
func Limits(p Profile, appCores float64, r Rule) []float64 {
	var l []float64
	for _, c := range p.CPU {
		x := max(0.01, r.Limit(c, p.Load))
		if appCores > 0 {
			x = min(x, appCores)
		}
		l = append(l, x)
	}
	return l
}

// CellResult is every policy's figures on one cell.
type CellResult struct {
	Cell    string   `json:"cell"`
	Results []Result `json:"results"`
}

// Evaluate runs every static rule, Escra at Σ static15, and the frontier
// (static at k × the ideal profile and Escra at the same totals) on one
// profile. Limits are capped at the app's CPUs, as the matrix caps them.
func Evaluate(p Profile, appCores float64, o EscraOptions) (CellResult, error) {
	m := Model{Demand: p.CPU, AppCores: appCores}
	out := CellResult{Cell: p.Cell()}
	limits := func(r Rule) []float64 { return Limits(p, appCores, r) }
	add := func(r Result, err error) error {
		if err == nil {
			out.Results = append(out.Results, r)
		}
		return err
	}
	var static15 float64
	for _, r := range Rules {
		res, err := m.Static(r.Name, limits(r))
		if err := add(res, err); err != nil {
			return out, err
		}
		if r.Name == "static15" {
			static15 = res.ReservedCores
		}
	}
	if err := add(m.Escra("escra", static15, o)); err != nil {
		return out, err
	}
	for _, k := range FrontierK {
		if k == 1.5 {
			continue // static15 and escra above
		}
		res, err := m.Static(StaticK(k).Name, limits(StaticK(k)))
		if err := add(res, err); err != nil {
			return out, err
		}
		if err := add(m.Escra(fmt.Sprintf("escra@%g", k), res.ReservedCores, o)); err != nil {
			return out, err
		}
	}
	return out, nil
}

// OracleShare is static15's most served together in one period over its
// reservation (Result.PeakServedCores): the least share of static15's
// cores at which moving budget between the containers every period, and
// nothing else, serves each as static15 does. NaN without samples.
func OracleShare(p Profile, appCores float64) float64 {
	var static15 Rule
	for _, r := range Rules {
		if r.Name == "static15" {
			static15 = r
		}
	}
	r, err := Model{Demand: p.CPU, AppCores: appCores}.Static(static15.Name, Limits(p, appCores, static15))
	if err != nil || !(r.ReservedCores > 0) || len(p.CPU) == 0 || len(p.CPU[0]) == 0 {
		return math.NaN()
	}
	return r.PeakServedCores / r.ReservedCores
}
