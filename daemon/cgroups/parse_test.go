package cgroups

import "testing"

func TestParseCPUStatV1AndV2(t *testing.T) {
	var st CPUStat
	v1 := "nr_periods 12\nnr_throttled 3\nthrottled_time 4500000\nnr_bursts 0\nburst_time 0\n"
	if err := ParseCPUStat([]byte(v1), &st); err != nil {
		t.Fatal(err)
	}
	if st.NrPeriods != 12 || st.NrThrottled != 3 || st.ThrottledUs != 4500 || st.HasUsage {
		t.Fatalf("v1: %+v", st)
	}
	v2 := "usage_usec 777\nuser_usec 700\nsystem_usec 77\nnr_periods 5\nnr_throttled 1\nthrottled_usec 90\n"
	if err := ParseCPUStat([]byte(v2), &st); err != nil {
		t.Fatal(err)
	}
	if st.UsageUs != 777 || !st.HasUsage || st.NrThrottled != 1 || st.ThrottledUs != 90 {
		t.Fatalf("v2: %+v", st)
	}
	if err := ParseCPUStat([]byte("nr_throttled x\n"), &st); err == nil {
		t.Fatal("malformed value accepted")
	}
}

func TestParseIntLimits(t *testing.T) {
	cases := map[string]int64{"max\n": Max, "-1\n": Max, "9223372036854771712\n": Max, "1048576\n": 1 << 20, " 0 ": 0}
	for in, want := range cases {
		got, err := ParseInt([]byte(in))
		if err != nil || got != want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-2", "12a", "99999999999999999999999", "--1"} {
		if _, err := ParseInt([]byte(bad)); err == nil {
			t.Errorf("ParseInt(%q) accepted", bad)
		}
	}
	q, p, err := ParseCPUMax([]byte("max 100000\n"))
	if err != nil || q != Max || p != 100000 {
		t.Fatalf("cpu.max: %d %d %v", q, p, err)
	}
	if v, ok := KeyedValue([]byte("oom_kill_disable 1\nunder_oom 1\noom_kill 0\n"), "under_oom"); !ok || v != 1 {
		t.Fatalf("under_oom %d %v", v, ok)
	}
}

func FuzzParseCPUStat(f *testing.F) {
	f.Add([]byte("nr_periods 12\nnr_throttled 3\nthrottled_time 4500000\n"))
	f.Add([]byte("usage_usec 1\nthrottled_usec 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st CPUStat
		_ = ParseCPUStat(b, &st)
		_, _ = ParseInt(b)
		_, _, _ = ParseCPUMax(b)
		_, _ = KeyedValue(b, "under_oom")
	})
}
