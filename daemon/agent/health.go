package agent

import (
	"context"
	"fmt"
	"time"
)

// ticker is a source with a period loop whose progress can be checked
// (cgroupfs.Source; the kernel backend's loop is in escra.ko).
type ticker interface{ LastTick() time.Time }

// healthSlack is how far behind a loop may fall before escrad counts as
// stuck: generous, because a loaded host delays timers by whole periods
// and a false restart drops every OOM trap for a moment.
const healthSlack = 5 * time.Second

// Healthy reports whether the loops escrad exists for still turn: the
// event loop (container starts and stops), the period sampler (telemetry
// and throttle events; cgroupfs backend) and the OOM trap watchdog. escrad
// pets systemd's watchdog only while it is nil, so a stuck escrad, which
// would leave containers at stale limits or trapped at their memory
// limit, is killed and restarted (docs/operator.md, "systemd").
func (a *Agent) Healthy(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return fmt.Errorf("not started")
	}
	ctx, cancel := context.WithTimeout(ctx, healthSlack)
	defer cancel()
	r := make(chan struct{})
	select {
	case a.ping <- r:
		<-r
	case <-ctx.Done():
		return fmt.Errorf("event loop did not answer within %v", healthSlack)
	}
	now := time.Now()
	if t := a.sampler; t != nil {
		if last := t.LastTick(); !last.IsZero() {
			if behind := now.Sub(last); behind > healthSlack+10*a.cfg.Period {
				return fmt.Errorf("period sampler last ran %v ago", behind.Round(time.Millisecond))
			}
		}
	}
	if a.sampler != nil {
		if last := a.rescue.LastRound(); !last.IsZero() {
			if behind := now.Sub(last); behind > healthSlack+2*time.Second {
				return fmt.Errorf("OOM trap watchdog last ran %v ago", behind.Round(time.Millisecond))
			}
		}
	}
	return nil
}
