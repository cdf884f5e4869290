package session

import (
	"fmt"
	"time"

	"golang.org/x/time/rate"
)

// pacer limits the messages one daemon's session is read at: past its
// burst, the reader waits for a token before the next read, so a host
// that floods its session (made-up registrations, usage reports, OOM
// requests) is slowed by TCP back-pressure and takes no more of the
// controller than its rate; other sessions have their own readers. The
// wait is counted (BadInput "session_rate"), at most once a second.
type pacer struct {
	lim    *rate.Limiter
	noted  time.Time
	waited int
}

func newPacer(perSecond float64, burst int) *pacer {
	if perSecond <= 0 {
		return &pacer{}
	}
	return &pacer{lim: rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))}
}

func (p *pacer) pace(s *Session, h Handler) {
	if p.lim == nil {
		return
	}
	now := time.Now()
	d := p.lim.ReserveN(now, 1).DelayFrom(now)
	if d <= 0 {
		return
	}
	p.waited++
	if now.Sub(p.noted) >= time.Second {
		h.BadInput(s, "session_rate", fmt.Errorf("daemon over its message rate (%.0f/s): %d messages delayed", float64(p.lim.Limit()), p.waited))
		p.noted, p.waited = now, 0
	}
	// Not past the dead-session deadline: the daemon is talking, too much.
	time.Sleep(min(d, s.cfg.DeadAfter/2))
}
