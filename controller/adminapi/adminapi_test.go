package adminapi

import (
	"reflect"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/spec"
)

// A controller started with its own parameters (escra-controller flags,
// here a 8 MiB reclaim margin and a 3 ms floor, as the benchmark runs it).
func controllerParams() allocator.Params {
	p := allocator.DefaultParams()
	p.SafeMarginBytes = 8 << 20
	p.CPUFloorUs = 3000
	p.Headroom = 0.3
	return p
}

func parse(t *testing.T, allocatorSection string) AppSpec {
	t.Helper()
	a, err := spec.Parse("a.yaml", []byte("name: a\ncpu: 1\nmemory: 64MiB\n"+allocatorSection))
	if err != nil {
		t.Fatal(err)
	}
	return FromSpec(a)
}

func TestSpecAllocatorSectionKeepsTheControllersOtherParameters(t *testing.T) {
	base := controllerParams()
	// No section: the controller's parameters and policy.
	if s := parse(t, ""); s.Policy != "" || s.Params != nil || !reflect.DeepEqual(s.EffectiveParams(base), base) {
		t.Fatalf("no section: policy %q, params %+v", s.Policy, s.EffectiveParams(base))
	}
	// A policy alone changes nothing else (it reset the margin to 50 MiB
	// and the floor to 5 ms: the benchmark's Escra apps ran so once).
	s := parse(t, "allocator: {policy: escra-paper}\n")
	if s.Policy != "escra-paper" || !reflect.DeepEqual(s.EffectiveParams(base), base) {
		t.Fatalf("policy only: policy %q, params %+v, want %+v", s.Policy, s.EffectiveParams(base), base)
	}
	// Named fields win; the others stay the controller's.
	s = parse(t, "allocator: {kappa: 0.5, headroom: 0}\n")
	want := base
	want.Kappa, want.Headroom = 0.5, 0
	if got := s.EffectiveParams(base); !reflect.DeepEqual(got, want) {
		t.Fatalf("kappa and headroom named:\n got %+v\nwant %+v", got, want)
	}
	// A floor is a share of the period: named alone it follows the
	// controller's period, named with a period it is read against that one.
	base.Period = 50 * time.Millisecond
	if got := parse(t, "allocator: {cpu_floor: 40m}\n").EffectiveParams(base); got.CPUFloorUs != 2000 {
		t.Errorf("40m floor on a 50 ms period: %d us, want 2000", got.CPUFloorUs)
	}
	if got := parse(t, "allocator: {cpu_floor: 40m, period: 200ms}\n").EffectiveParams(base); got.CPUFloorUs != 8000 || got.Period != 200*time.Millisecond {
		t.Errorf("40m floor on a 200 ms period: %d us, period %v, want 8000 us", got.CPUFloorUs, got.Period)
	}
	// Params from an API caller without names are taken whole.
	whole := allocator.DefaultParams()
	if got := (AppSpec{Params: &whole}).EffectiveParams(base); !reflect.DeepEqual(got, whole) {
		t.Errorf("params without names: %+v", got)
	}
	if err := (AppSpec{Name: "a", CPUCores: 1, MemoryBytes: 64 << 20, Params: &whole, ParamsNamed: []string{"bogus"}}).Validate(); err == nil {
		t.Error("an unknown named field was accepted")
	}
}

// Every parameter a spec's allocator section can name is one EffectiveParams
// knows: a section naming them all runs with exactly the spec's values,
// whatever the controller's are.
func TestEveryNamedSpecFieldIsApplied(t *testing.T) {
	s := parse(t, "allocator: {policy: escra, kappa: 0.5, gamma: 0.3, upsilon: 7, window: 4, period: 50ms,\n"+
		"  reclaim_margin: 16MiB, cpu_floor: 40m, oom_step: 8MiB, headroom: 0.4}\n")
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(s.ParamsNamed) != len(paramFields) {
		t.Fatalf("named %v, EffectiveParams knows %d fields", s.ParamsNamed, len(paramFields))
	}
	if got := s.EffectiveParams(controllerParams()); !reflect.DeepEqual(got, *s.Params) {
		t.Fatalf("every field named:\n got %+v\nwant %+v", got, *s.Params)
	}
}

// A member's caps come from the template its name was made from (the
// deployer's app-T and app-T-N, or a hand-started T); the longest match wins.
func TestMaxFor(t *testing.T) {
	s := AppSpec{Name: "shop", Maxima: []Max{{Container: "web", CPUCores: 1}, {Container: "web-api", CPUCores: 2}}}
	for name, want := range map[string]float64{"shop-web": 1, "shop-web-3": 1, "web": 1, "shop-web-api": 2,
		"shop-web-api-12": 2, "shop-webx": 0, "shop-web-": 0, "shop-web-3a": 0, "other-web": 0, "shop-db-1": 0} {
		if got := s.MaxFor(name).CPUCores; got != want {
			t.Errorf("%s: %g, want %g", name, got, want)
		}
	}
	if err := (AppSpec{Name: "a", CPUCores: 1, MemoryBytes: 1 << 30, Mode: "off"}).Validate(); err == nil {
		t.Error("mode off accepted")
	}
}
