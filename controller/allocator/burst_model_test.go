package allocator

import (
	"math"
	"math/rand"
	"sort"
	"testing"
)

// A fluid model of the Burst load (docs/allocator.md, "The headroom
// floor"): each member gets work at 0.1 core, 0.45 core in 10 s of every
// 20 s, ± 50 % per period; what its quota cannot serve in a period queues.
// Delay is the queue over the quota plus 5 ms of service.
type burstResult struct {
	p99Ms, slackP50 float64
	throttled       int
}

// runBurstModelEvents: with events, a member whose demand reaches 95 % of
// its quota within a period sends a throttle event (as escrad's near-
// throttle detection does) about 2 ms later than its quota would run out
// at an even arrival rate; the policy's raise refills its runtime for the
// rest of the period.
func runBurstModelEvents(t *testing.T, p Params, pol Policy, members int, seed int64, events bool) burstResult {
	t.Helper()
	a, err := NewBooks("m", Budget{CPUCores: 0.7 * float64(members), MemoryBytes: 1 << 30}, p, pol)
	if err != nil {
		t.Fatal(err)
	}
	for i := range members {
		if _, err := a.Join(Join{Key: Key(i + 1), HostMaxUs: 200000}); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewSource(seed))
	backlog := make([]float64, members)
	var delays, slack []float64
	var res burstResult
	for t0 := range 600 { // 60 s of 100 ms periods
		rate := 0.1
		if math.Mod(float64(t0)/10, 20) >= 10 {
			rate = 0.45
		}
		for i := range members {
			k := Key(i + 1)
			q := float64(a.Member(k).QuotaUs)
			arrived := rate * 100000 * (0.5 + r.Float64())
			demand := backlog[i] + arrived
			used := math.Min(demand, q)
			if events && demand >= 0.95*q {
				// Fraction of the period gone when 95 % of the quota is used.
				f := math.Min(1, 0.95*q/demand+0.02)
				// Siblings the event cut take it in their own turn.
				if _, err := a.Throttle(k, uint64(t0)); err == nil && float64(a.Member(k).QuotaUs) > q {
					q2 := float64(a.Member(k).QuotaUs)
					used = math.Min(demand, 0.95*q+q2*(1-f))
					q = q2
				}
			}
			backlog[i] = demand - used
			for range int(arrived / 5000) { // 5 ms requests
				delays = append(delays, backlog[i]/math.Max(q, 1)*100+5)
			}
			slack = append(slack, math.Max(0, q-used)/1e5)
			th := demand > used+1
			if th {
				res.throttled++
			}
			if _, err := a.CPU(k, Stat{Seq: uint64(t0), QuotaUs: int64(q), PeriodUs: 100000,
				UnusedUs: int64(math.Max(0, q-used)), Throttled: th, UsageUs: int64(used)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sort.Float64s(delays)
	sort.Float64s(slack)
	res.p99Ms, res.slackP50 = delays[len(delays)*99/100], slack[len(slack)/2]
	return res
}

// onsetBoost is the rejected alternative: a throttled member steps as if
// it had been throttled in at least minTh of the window.
type onsetBoost struct {
	Escra
	minTh float64
}

func (o onsetBoost) NextQuota(in CPUInput) (int64, Reason) {
	if in.Throttled {
		in.AvgThrottle = max(in.AvgThrottle, o.minTh)
	}
	return o.Escra.NextQuota(in)
}

func meanBurstModel(t *testing.T, p Params, pol Policy, members int) burstResult {
	return meanBurstModelEvents(t, p, pol, members, false)
}

func meanBurstModelEvents(t *testing.T, p Params, pol Policy, members int, events bool) burstResult {
	var m burstResult
	const seeds = 5
	for s := range int64(seeds) {
		r := runBurstModelEvents(t, p, pol, members, s, events)
		m.p99Ms += r.p99Ms / seeds
		m.slackP50 += r.slackP50 / seeds
		m.throttled += r.throttled
	}
	m.throttled /= seeds
	return m
}

// The figures docs/allocator.md quotes come from this test (-v prints
// them): the headroom floor throttles less and delays less than the Escra paper's
// rule on the Burst model, without more slack; a larger first step at
// throttle onset starves members of a larger app.
func TestHeadroomFloorOnBurstModel(t *testing.T) {
	paper, floor := DefaultParams(), DefaultParams()
	paper.Headroom = 0
	one := map[string]burstResult{
		"paper":    meanBurstModel(t, paper, Escra{}, 1),
		"headroom": meanBurstModel(t, floor, Escra{}, 1),
	}
	for k, v := range one {
		t.Logf("1 member, %s: throttled %d periods/min, p99 delay %.0f ms, p50 CPU slack %.3f core", k, v.throttled, v.p99Ms, v.slackP50)
	}
	if h, p := one["headroom"], one["paper"]; h.throttled*2 > p.throttled || h.p99Ms >= p.p99Ms || h.slackP50 > p.slackP50 {
		t.Errorf("headroom %+v not better than the paper's rule %+v", h, p)
	}
	six := meanBurstModel(t, floor, Escra{}, 6)
	boosted := meanBurstModel(t, floor, onsetBoost{minTh: 0.3}, 6)
	t.Logf("6 members: p99 delay %.0f ms with headroom, %.0f ms with an onset boost", six.p99Ms, boosted.p99Ms)
	if boosted.p99Ms < 2*six.p99Ms {
		t.Errorf("onset boost p99 %.0f ms vs %.0f ms: the rejection in docs/allocator.md no longer holds", boosted.p99Ms, six.p99Ms)
	}
}

// The figures docs/escra-policy.md quotes for throttle events (-v prints
// them): on the same model, the escra policy with near-throttle events
// throttles less and delays less than without, for one member and for
// six sharing one budget (one fair share per event does not starve the
// rest), and the paper's policy ignores the events.
func TestThrottleEventsOnBurstModel(t *testing.T) {
	p := DefaultParams()
	for _, n := range []int{1, 6} {
		without := meanBurstModelEvents(t, p, Escra{}, n, false)
		with := meanBurstModelEvents(t, p, Escra{}, n, true)
		paper := meanBurstModelEvents(t, p, EscraPaper{}, n, true)
		t.Logf("%d member(s): without events throttled %d periods/min, p99 %.0f ms, p50 slack %.3f; with events %d, %.0f ms, %.3f; escra-paper with events sent %d, %.0f ms, %.3f",
			n, without.throttled, without.p99Ms, without.slackP50, with.throttled, with.p99Ms, with.slackP50,
			paper.throttled, paper.p99Ms, paper.slackP50)
		if with.p99Ms >= without.p99Ms || with.throttled >= without.throttled {
			t.Errorf("%d members: events %+v not better than without %+v", n, with, without)
		}
	}
}
