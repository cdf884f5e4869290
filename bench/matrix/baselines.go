package matrix

import (
	"fmt"
	"strings"

	"github.com/escra-dev/escra/bench/replay"
)

// The static baselines and the frontier policies. Every static limit is
// k × one profiling rule's figure of the replica (bench/replay rules.go):
//
//	static15, static10, static075, static05: k × the peak of the 1 s sliding mean
//	static15mon: 1.5 × the peak of 10 s aligned means (60 s for trace loads)
//	vpastatic:   1.15 × the p90 of 10 s aligned means, VPA's rule applied once
//
// escra-k050, escra-k075, escra-k100 are Escra with the budget of static at
// k = 0.5, 0.75, 1.0 × the 1 s peak (escra's is static15's): the frontier.

// staticRule returns a static policy's multiple and the profile figure
// it multiplies.
func staticRule(policy string, pk Peak) (k, cores float64, ok bool) {
	switch policy {
	case "static15":
		return 1.5, pk.CPU, true
	case "static10":
		return 1, pk.CPU, true
	case "static075":
		return 0.75, pk.CPU, true
	case "static05":
		return 0.5, pk.CPU, true
	case "static15mon":
		return 1.5, pk.CPUMon, true
	case "vpastatic":
		return 1.15, pk.CPUP90, true
	}
	return 0, 0, false
}

// FrontierK is the k of an Escra frontier policy (escra-k075 → 0.75);
// 1.5 for escra and escra-paper, 0 for a baseline.
func FrontierK(policy string) float64 {
	base, _ := SplitBatch(policy)
	if !IsEscra(base) {
		return 0
	}
	if s, ok := strings.CutPrefix(base, "escra-k"); ok {
		var n int
		if _, err := fmt.Sscanf(s, "%d", &n); err == nil && n > 0 {
			return float64(n) / 100
		}
	}
	return 1.5
}

// EscraBase is the allocator policy an Escra benchmark policy runs
// (escra-k075 runs escra).
func EscraBase(policy string) string {
	base, _ := SplitBatch(policy)
	if strings.HasPrefix(base, "escra-k") {
		return "escra"
	}
	return base
}

// StaticKCores is Σ over replicas of k × the 1 s peak, each capped at the
// app's CPUs: static at k's reservation, and the Escra frontier budget.
func (c Config) StaticKCores(peaks []Peak, k float64) float64 {
	sum := 0.0
	for _, p := range peaks {
		sum += c.capCores(k * p.CPU)
	}
	return sum
}

// EscraBudget is an Escra policy's app budget for a cell: exactly the
// reservation of static at the policy's k.
func (c Config) EscraBudget(peaks []Peak, policy string) float64 {
	return c.StaticKCores(peaks, FrontierK(policy))
}

// peakOf applies every profiling rule to one replica's 100 ms series.
func peakOf(cpu []float64, memPeak float64, load string) Peak {
	w := replay.MonitorWindow(load)
	return Peak{CPU: replay.Peak1s(cpu), Mem: max(memPeak, 16<<20),
		CPUMon: replay.PeakAligned(cpu, w), CPUP90: replay.P90Aligned(cpu, w)}
}

// ProfileSeedOffset: the profiling run's schedule is seeded Seed +
// ProfileSeedOffset, which no measured repetition uses (they use Seed +
// rep), so no measured run replays the very requests its limits were
// profiled on.
const ProfileSeedOffset = 1_000_003

// FillRules computes the aligned-mean figures of peaks profiled before
// they were recorded (an older profiles.json), from the CPU series.
func (p *Profile) FillRules(load string) {
	for i := range p.Peaks {
		if i < len(p.CPU) && p.Peaks[i].CPUMon == 0 {
			w := replay.MonitorWindow(load)
			p.Peaks[i].CPUMon, p.Peaks[i].CPUP90 = replay.PeakAligned(p.CPU[i], w), replay.P90Aligned(p.CPU[i], w)
		}
	}
}

// OffsetOnly: the policy runs on the offset cells only (the frontier and
// the operators' baselines; today's cells keep today's policies, so their
// runs stay as long as they were).
func OffsetOnly(policy string) bool {
	switch base, _ := SplitBatch(policy); base {
	case "static15mon", "vpastatic", "static05", "escra-k050", "escra-k075", "escra-k100":
		return true
	}
	return false
}
