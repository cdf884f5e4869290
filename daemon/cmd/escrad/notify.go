package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/escra-dev/escra/daemon/agent"
)

// notifySystemd tells systemd (Type=notify) that escrad is ready once the
// agent's loops run, then, when the unit sets WatchdogSec=, pets the
// watchdog at half that interval, but only while agent.Healthy says the
// event loop, the period sampler and the OOM trap watchdog still turn. A
// stuck escrad is then killed (SIGABRT: Go prints every goroutine to the
// journal) and restarted by Restart=always; ExecStopPost re-enables the
// OOM killer of the groups it had trapped. Without systemd
// (NOTIFY_SOCKET unset) every call is a no-op.
func notifySystemd(ctx context.Context, a *agent.Agent, log *slog.Logger) {
	select {
	case <-a.Started():
	case <-ctx.Done():
		return
	}
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify READY failed", "err", err)
	} else if ok {
		log.Debug("told systemd we are ready")
	}
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil || every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
			return
		case <-t.C:
		}
		if err := a.Healthy(ctx); err != nil {
			if ctx.Err() == nil {
				log.Error("not petting the systemd watchdog: escrad is stuck and will be restarted if this lasts", "err", err, "watchdog", every)
			}
			failing = true
			continue
		}
		if failing {
			log.Info("loops turn again; petting the systemd watchdog")
			failing = false
		}
		_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}
