package pemaapp

import (
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	ss := []Sample{{At: 0, Latency: 10 * time.Millisecond, OK: true}, {At: time.Second, Latency: 30 * time.Millisecond},
		{At: 2500 * time.Millisecond, Latency: 5 * time.Millisecond, OK: true}}
	w := Windows(ss, 2*time.Second, 4*time.Second)
	if len(w) != 2 || w[0].Requests != 2 || w[0].Failed != 1 || w[0].P95 != 30*time.Millisecond || w[1].P95 != 5*time.Millisecond {
		t.Fatalf("%+v", w)
	}
}
