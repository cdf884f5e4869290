package app

import (
	"testing"
	"time"
)

// Every app on one period is woken by the same ticker, and the ticker
// ends with its last subscriber.
func TestPeriodClockSharedTicker(t *testing.T) {
	c := &periodClock{subs: map[time.Duration]*clockGroup{}}
	a, stopA := c.subscribe(5 * time.Millisecond)
	b, stopB := c.subscribe(5 * time.Millisecond)
	if n := len(c.subs); n != 1 {
		t.Fatalf("%d tickers for one period, want 1", n)
	}
	for _, ch := range []<-chan struct{}{a, b, a, b} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("no tick")
		}
	}
	stopA()
	if n := len(c.subs); n != 1 {
		t.Fatalf("ticker gone with a subscriber left (%d)", n)
	}
	stopB()
	if n := len(c.subs); n != 0 {
		t.Fatalf("%d tickers after the last subscriber left, want 0", n)
	}
}
