// Package wallclock schedules periodic work at multiples of its interval
// on the wall clock. escrad samples every group at the same phase each
// period (Escra §IV-B); its slower chores (heartbeats, the OOM watchdog,
// the restore check) use the same grid, so on an idle host they fire in
// the wake-up the period's sample already paid for instead of their own:
// on a Go daemon that mostly sleeps, each wake-up costs the runtime more
// than the work it does.
package wallclock

import "time"

// Until is the time from now to the next multiple of every on the wall
// clock. An edge closer than every/20 is skipped for the one after it: a
// timer that fired a little early must not fire again at once.
func Until(now time.Time, every time.Duration) time.Duration {
	d := every - time.Duration(now.UnixNano()%int64(every))
	if d < every/20 {
		d += every
	}
	return d
}

// Ticker delivers on C at each multiple of its interval on the wall clock.
// Unlike a time.Ticker it does not drift from the grid, and it fires again
// only after Next: a receiver that falls behind skips edges instead of
// finding a stale tick queued.
type Ticker struct {
	C     <-chan time.Time
	t     *time.Timer
	every time.Duration
}

// NewTicker starts a Ticker for every (> 0).
func NewTicker(every time.Duration) *Ticker {
	t := time.NewTimer(Until(time.Now(), every))
	return &Ticker{C: t.C, t: t, every: every}
}

// Next arms the ticker for the next edge; call it after each receive.
func (k *Ticker) Next() { k.t.Reset(Until(time.Now(), k.every)) }

// Stop stops the ticker.
func (k *Ticker) Stop() { k.t.Stop() }
