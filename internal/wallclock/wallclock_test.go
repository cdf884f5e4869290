package wallclock

import (
	"testing"
	"time"
)

func TestUntilIsAligned(t *testing.T) {
	p := 100 * time.Millisecond
	for _, c := range []struct {
		at   int64 // ns past a whole second
		want time.Duration
	}{
		{30_000_000, 70 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{99_000_000, 101 * time.Millisecond}, // just before the edge: the next one
	} {
		if d := Until(time.Unix(7, c.at), p); d != c.want {
			t.Errorf("%d ns past: got %v, want %v", c.at, d, c.want)
		}
	}
	// A chore every second lands on the edge of every tenth period.
	now := time.Unix(7, 430_000_000)
	if a, b := now.Add(Until(now, time.Second)), time.Unix(8, 0); !a.Equal(b) {
		t.Fatalf("1 s edge at %v, want %v", a, b)
	}
}

// A ticker fires at or after its edge, and again only after Next.
func TestTickerFiresOnEdges(t *testing.T) {
	const every = 20 * time.Millisecond
	armed := time.Now()
	k := NewTicker(every)
	defer k.Stop()
	for i := range 3 {
		edge := armed.Add(Until(armed, every))
		at := <-k.C
		if at.Before(edge) {
			t.Fatalf("tick %d at %v, before its edge %v", i, at, edge)
		}
		select {
		case <-k.C:
			t.Fatal("a second tick without Next")
		case <-time.After(2 * every):
		}
		armed = time.Now()
		k.Next()
	}
}
