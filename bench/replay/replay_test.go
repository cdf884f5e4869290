package replay

import (
	"math"
	"testing"

	"github.com/escra-dev/escra/controller/allocator"
)

// The profiling rules on a series whose 1 s and 10 s views differ: 10 s
// calm at 0.1 core, then 10 s whose first second is at 1 core.
func TestRules(t *testing.T) {
	var s []float64
	for i := range 200 {
		v := 0.1
		if i >= 100 && i < 110 {
			v = 1
		}
		s = append(s, v)
	}
	for name, c := range map[string]struct{ got, want float64 }{
		"1 s peak":         {Peak1s(s), 1},
		"10 s aligned":     {PeakAligned(s, 100), 0.19},
		"p90 of 10 s":      {P90Aligned(s, 100), 0.19},
		"idle floor":       {Peak1s(make([]float64, 20)), MinPeakCores},
		"trace bucket":     {float64(MonitorWindow("trace")), 600},
		"burst bucket":     {float64(MonitorWindow("burst")), 100},
		"short tail alone": {PeakAligned(s[:50], 100), 0.1},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, c.got, c.want)
		}
	}
}

// The fluid model on a hand-worked case: demand 0.5 core in one period
// against a 0.3 core limit waits 0.02 core-s, is served next period.
func TestStaticFluid(t *testing.T) {
	m := Model{Demand: [][]float64{{0.5, 0, 0, 0}}, AppCores: 1}
	r, err := m.Static("s", []float64{0.3})
	if err != nil {
		t.Fatal(err)
	}
	if r.ThrottledShare != 0.25 || math.Abs(r.WaitingCoreS-0.02) > 1e-9 {
		t.Errorf("throttled %v, waiting %v core-s; want 0.25 and 0.02", r.ThrottledShare, r.WaitingCoreS)
	}
	// The cpuset binds before the limits: two containers at 0.8 on 1 CPU.
	m = Model{Demand: [][]float64{{0.8, 0}, {0.8, 0}}, AppCores: 1}
	if r, _ = m.Static("s", []float64{1, 1}); math.Abs(r.WaitingCoreS-0.06) > 1e-9 || r.ThrottledShare != 0 {
		t.Errorf("cpuset-bound: throttled %v, waiting %v; want 0 and 0.06", r.ThrottledShare, r.WaitingCoreS)
	}
}

// The figures of one offset cell on a committed profile (offset-pair/burst,
// two services bursting half a cycle apart, 18 s, recorded by bench-run's
// profiling run on the real engine): the operators' limits
// throttle most, Escra at each static total throttles less than static,
// the release lever lowers Escra's throttling further, and the exact
// figures docs/escra-policy.md quotes hold.
func TestOffsetPairReplay(t *testing.T) {
	ps, err := ReadProfiles("testdata/offset-pair-burst.json")
	if err != nil {
		t.Fatal(err)
	}
	eval := func(release int) map[string]Result {
		p := allocator.DefaultParams()
		p.ReleasePeriods = release
		cr, err := Evaluate(ps[0], 1, EscraOptions{Params: p, Events: true})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Result{}
		for _, r := range cr.Results {
			out[r.Policy] = r
		}
		return out
	}
	off, on := eval(0), eval(allocator.DefaultParams().ReleasePeriods)
	want := []struct {
		res      Result
		thr, wai float64
	}{
		{on["static15"], 0.0196, 0.0972},
		{on["static15mon"], 0.5810, 15.5999},
		{on["vpastatic"], 0.7654, 36.2464},
		{on["static@0.75"], 0.4804, 6.5555},
		{off["escra@0.75"], 0.1927, 1.4211},
		{on["escra@0.75"], 0.1341, 0.3754},
		{on["escra"], 0.0196, 0.0464},
	}
	for _, w := range want {
		if math.Abs(w.res.ThrottledShare-w.thr) > 0.0001 || math.Abs(w.res.WaitingCoreS-w.wai) > 0.0001 {
			t.Errorf("%s: throttled %.3f, waiting %.3f core-s; want %.3f and %.3f", w.res.Policy, w.res.ThrottledShare, w.res.WaitingCoreS, w.thr, w.wai)
		}
	}
	for _, k := range []string{"0.5", "0.75", "1"} {
		s, e, e0 := on["static@"+k], on["escra@"+k], off["escra@"+k]
		if e.ReservedCores != s.ReservedCores {
			t.Errorf("k=%s: Escra reserves %v, static %v: budgets must be equal", k, e.ReservedCores, s.ReservedCores)
		}
		if !(e.ThrottledShare < s.ThrottledShare) || !(e.ThrottledShare < e0.ThrottledShare) {
			t.Errorf("k=%s: throttled static %.3f, Escra without release %.3f, with %.3f", k, s.ThrottledShare, e0.ThrottledShare, e.ThrottledShare)
		}
	}
}

func TestReadProfilesRejectsShortSeries(t *testing.T) {
	p := t.TempDir() + "/p.json"
	if err := WriteProfiles(p, []Profile{{Workload: "w", Load: "l", CPU: [][]float64{{1, 2}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProfiles(p); err == nil {
		t.Error("a 200 ms series was accepted")
	}
}

// A container the cpuset holds back is not throttled: CFS counts a
// throttle only when the group's quota runs out, and the allocator must
// see the same (a sibling flagged throttled by cpuset contention would
// never give quota back). The oracle figure is the most served together.
func TestEscraThrottledOnlyWhenTheQuotaBinds(t *testing.T) {
	m := Model{Demand: [][]float64{{0.8, 0}, {0.8, 0}}, AppCores: 1}
	r, err := m.Escra("e", 4, EscraOptions{Params: allocator.DefaultParams(), Events: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.ThrottledShare != 0 || math.Abs(r.WaitingCoreS-0.06) > 1e-9 {
		t.Errorf("cpuset-bound under Escra: throttled %v, waiting %v; want 0 and 0.06", r.ThrottledShare, r.WaitingCoreS)
	}
	s, err := m.Static("s", []float64{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s.PeakServedCores-1) > 1e-9 || math.Abs(r.PeakServedCores-1) > 1e-9 {
		t.Errorf("peak Σ served: static %v, Escra %v; want the cpuset's 1 core", s.PeakServedCores, r.PeakServedCores)
	}
}

// The oracle share on the committed profile: static15's most served in
// one period over its reservation (the figure docs/frontier.md quotes).
func TestOracleShareOfTheRecordedProfile(t *testing.T) {
	ps, err := ReadProfiles("testdata/offset-pair-burst.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := OracleShare(ps[0], 1); math.Abs(got-0.619) > 0.001 {
		t.Errorf("oracle share %.4f, want 0.619", got)
	}
	if got := OracleShare(Profile{Workload: "w", Load: "l"}, 1); !math.IsNaN(got) {
		t.Errorf("oracle share of an empty profile %v, want NaN", got)
	}
}
