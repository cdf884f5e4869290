package cgroupfs

import (
	"testing"
)

// The near-quota selection: which period record makes a group polled
// until the next (markHot), and the rate at which warmUp turns a cold
// one hot (hotRate).
func TestMarkHotSelectsNearQuotaOrThrottled(t *testing.T) {
	c := &Source{ThrottleHot: DefaultThrottleHot}
	for _, tc := range []struct {
		name      string
		throttled bool
		usageUs   uint64
		quotaUs   int64
		want      bool
	}{
		{"idle", false, 0, 10000, false},
		{"timer blip", false, 50, 10000, false},
		{"half the quota", false, 5000, 10000, false},
		{"just under the threshold", false, 7999, 10000, false},
		{"at the threshold", false, 8000, 10000, true},
		{"the policy's steady 91 %", false, 9100, 10000, true},
		{"over the quota (late window)", false, 12000, 10000, true},
		{"throttled with little usage", true, 100, 10000, true},
		{"no quota", false, 1_000_000, -1, false},
		{"no quota, throttled counter moved", true, 0, -1, false},
		{"zero quota", true, 5000, 0, false},
	} {
		s := &sampled{hot: !tc.want} // the result must not depend on the old state
		c.markHot(s, tc.throttled, tc.usageUs, tc.quotaUs)
		if s.hot != tc.want {
			t.Errorf("%s: hot %v, want %v", tc.name, s.hot, tc.want)
		}
	}
	// A lower threshold selects more.
	c.ThrottleHot = 0.5
	s := &sampled{}
	if c.markHot(s, false, 5000, 10000); !s.hot {
		t.Error("threshold 0.5: 50 % of the quota not hot")
	}
	if c.markHot(s, false, 4999, 10000); s.hot {
		t.Error("threshold 0.5: 49.99 % of the quota hot")
	}
}

func TestHotRateOnlyForColdPrimedGroupsWithAQuota(t *testing.T) {
	quota := map[uint32][2]int64{1: {10000, 100000}, 2: {-1, 100000}, 3: {20000, 0}}
	c := &Source{ThrottleHot: 0.8, Limits: func(h uint32) (int64, uint32) { q := quota[h]; return q[0], uint32(q[1]) }}
	for _, tc := range []struct {
		name string
		s    sampled
		want float64
	}{
		{"cold, 10 ms per 100 ms", sampled{h: 1, primed: true}, 0.08},
		{"hot already", sampled{h: 1, primed: true, hot: true}, 0},
		{"no baseline", sampled{h: 1}, 0},
		{"no quota", sampled{h: 2, primed: true}, 0},
		{"period unknown: 100 ms", sampled{h: 3, primed: true}, 0.16},
	} {
		if got := c.hotRate(&tc.s); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s: rate %v, want %v", tc.name, got, tc.want)
		}
	}
	c.Limits = nil
	if r := c.hotRate(&sampled{h: 1, primed: true}); r != 0 {
		t.Errorf("no limits known: rate %v, want 0", r)
	}
}
