package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/escra-dev/escra/controller/server"
)

// StartController runs escra-controller's server in this process on
// loopback with the given apps (no periodic reclaim: the scenarios decide
// what happens to memory). step > 0 overrides the OOM grant step.
func StartController(ctx context.Context, step int64, apps ...server.AppSpec) (*server.Server, error) {
	return server.Start(ctx, controllerConfig(step, apps))
}

// StartControllerNoCredit is StartController with host-local memory
// credit off, so every OOM request reaches the controller (the scenarios
// that check what the controller is asked).
func StartControllerNoCredit(ctx context.Context, step int64, apps ...server.AppSpec) (*server.Server, error) {
	cfg := controllerConfig(step, apps)
	cfg.Params.MemCreditFraction = 0
	return server.Start(ctx, cfg)
}

func controllerConfig(step int64, apps []server.AppSpec) server.Config {
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.ReclaimEvery = 0
	cfg.OOMStepBytes = step
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Apps = apps
	return cfg
}

// Member is the controller's view of the container name.
func Member(srv *server.Server, name string) (server.ContainerState, bool) {
	for _, c := range srv.Snapshot().Containers {
		if c.Name == name {
			return c, true
		}
	}
	return server.ContainerState{}, false
}

// Registered waits until the controller has name with its bootstrap
// limits applied in the cgroup (memory.max no longer "max").
func Registered(srv *server.Server, name string, cg *Cgroup) (server.ContainerState, error) {
	for end := time.Now().Add(20 * time.Second); ; {
		if m, ok := Member(srv, name); ok && m.MemoryLimitBytes > 0 {
			if v, _ := cg.Get("memory.max"); v == strconv.FormatInt(m.MemoryLimitBytes, 10) {
				return m, nil
			}
		}
		if time.Now().After(end) {
			return server.ContainerState{}, fmt.Errorf("controller did not register %s with a memory limit applied within 20s", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
