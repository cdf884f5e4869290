package load

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRateCSVRoundTripAndSchedule(t *testing.T) {
	var b bytes.Buffer
	if err := WriteRateCSV(&b, []float64{100, 0, 300}); err != nil {
		t.Fatal(err)
	}
	rates, err := ReadRateCSV(&b)
	if err != nil || len(rates) != 3 || rates[2] != 300 {
		t.Fatalf("round trip: %v %v", rates, err)
	}
	s := RateCSV{Rates: rates, Seed: 1}
	sch := s.Schedule(4 * time.Second)
	sorted(t, sch, 4*time.Second)
	if n := countIn(sch, time.Second, 2*time.Second); n != 0 {
		t.Fatalf("%d arrivals in a 0 req/s second", n)
	}
	if n := countIn(sch, 2*time.Second, 3*time.Second); n < 240 || n > 360 {
		t.Fatalf("%d arrivals in a 300 req/s second", n)
	}
	if n := countIn(sch, 3*time.Second, 4*time.Second); n != 0 {
		t.Fatalf("%d arrivals after the trace", n)
	}
	for _, bad := range []string{"", "1\n-2\n", "1\nx\n", "NaN\n"} {
		if _, err := ReadRateCSV(strings.NewReader(bad)); err == nil {
			t.Fatalf("accepted %q", bad)
		}
	}
	if r, err := ReadRateCSV(strings.NewReader("# azure\nminute,count\n0,5\n1,7\n")); err != nil || len(r) != 2 {
		t.Fatalf("comment + header: %v %v", r, err)
	}
}
