package agent

import (
	"context"
	"time"

	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/internal/wallclock"
)

// dockerPeriodUs is the CFS period Docker uses for docker run --cpus.
const dockerPeriodUs = 100_000

// dockerLimits turns the limits the engine reports (docker inspect) into
// the ones to put back: unset means unlimited (-1), as for Docker.
func dockerLimits(l containers.Limits, found limits.Current) limits.Current {
	out := limits.Current{CPUQuotaUs: -1, MemoryBytes: -1}
	switch {
	case l.CPUQuotaUs > 0:
		out.CPUQuotaUs = l.CPUQuotaUs
		out.CPUPeriodUs = l.CPUPeriodUs
	case l.NanoCPUs > 0:
		out.CPUQuotaUs = max(l.NanoCPUs*dockerPeriodUs/1e9, 1000)
		out.CPUPeriodUs = dockerPeriodUs
	}
	if out.CPUPeriodUs == 0 {
		out.CPUPeriodUs = found.CPUPeriodUs
	}
	if l.MemoryBytes > 0 {
		out.MemoryBytes = l.MemoryBytes
	}
	return out
}

// restoreLoop watches the controller link: once no session has been up for
// RestoreAfter, every managed container gets its own limits back, so a
// host whose controllers are all gone does not keep limits sized for a
// moment long past. A session coming back resumes normal control (its
// decisions win over a restore, limits.Applier.Restore).
func (a *Agent) restoreLoop(ctx context.Context) {
	tick := min(max(a.cfg.RestoreAfter/10, 50*time.Millisecond), time.Second)
	t := wallclock.NewTicker(tick) // with a period's sample (wallclock)
	defer t.Stop()
	down := time.Now() // no session yet
	restored := false
	lastFailed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Next()
		if a.link.Connected() {
			if restored {
				a.log.Info("controller session back: normal control resumes")
			}
			down, restored = time.Time{}, false
			continue
		}
		if down.IsZero() {
			down = time.Now()
		}
		if time.Since(down) < a.cfg.RestoreAfter {
			continue
		}
		// Containers that arrive while restored are put back too (once).
		// A put-back that failed (Docker's memory limit is below what the
		// container now uses, after an OOM grant) is tried again every
		// tick: once usage falls below it, Docker's limit is back.
		n, failed := 0, 0
		var firstErr error
		for _, m := range a.list() {
			if m.restored.Swap(true) {
				continue
			}
			if a.link.Connected() {
				m.restored.Store(false)
				break
			}
			wrote, err := a.app.Restore(m.h, m.orig)
			switch {
			case err != nil:
				m.restored.Store(false)
				failed++
				if firstErr == nil {
					firstErr = err
				}
			case wrote:
				n++
				a.m.restored.Inc()
				a.followLimit(m)
			}
		}
		if !restored || n > 0 || failed != lastFailed {
			a.log.Warn("no controller reachable: limits put back to what Docker knows", "for", time.Since(down).Round(time.Millisecond),
				"containers", n, "failed", failed, "err", firstErr)
		}
		restored, lastFailed = true, failed
	}
}

// SessionEnded implements link.SessionObserver: the next session's
// generations start again from 1, and its containers may be restored.
func (a *Agent) SessionEnded() {
	a.app.ResetGenerations()
	for _, m := range a.list() {
		m.restored.Store(false)
	}
}
