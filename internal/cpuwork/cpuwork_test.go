package cpuwork

import (
	"testing"
	"time"
)

// The work unit is measured by CPU time: a second measurement under the
// same conditions agrees within 1.5× (wall-time calibration on this
// shared machine varied 2.5×).
func TestPerMs(t *testing.T) {
	a, err := PerMs(5, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := PerMs(5, 20*time.Millisecond)
	if a < 10 || b < 10 || float64(a)/float64(b) > 1.5 || float64(b)/float64(a) > 1.5 {
		t.Fatalf("hashes per ms %d then %d", a, b)
	}
	t.Logf("%d, %d", a, b)
	if _, err := PerMs(0, time.Millisecond); err == nil {
		t.Fatal("zero windows accepted")
	}
}
