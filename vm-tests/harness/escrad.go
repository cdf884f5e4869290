package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/source/kmod"
)

// Escrad is escrad's agent with the kernel backend (escra.ko), run in the
// guest's own process against a controller, for the whole-path scenarios.
type Escrad struct {
	a      *agent.Agent
	cancel context.CancelFunc
	done   chan error
}

// StartEscrad runs an agent on the kernel backend with a 100 ms period,
// the given OOM verdict deadline and static cgroups, talking to the
// controller at addr. It fails unless the kernel backend was picked.
func StartEscrad(ctx context.Context, addr string, deadline time.Duration, groups ...containers.CgroupSpec) (*Escrad, error) {
	a, err := agent.New(agent.Config{
		HostID: "vm", Controller: addr, Period: 100 * time.Millisecond,
		Backend: agent.BackendKernel, KernelSource: kmod.NewSource,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), OOMDeadline: deadline, Cgroups: groups,
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if a.Backend() != agent.BackendKernel {
		return nil, fmt.Errorf("agent picked backend %s", a.Backend())
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Escrad{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- a.Run(ctx) }()
	return e, nil
}

// Stop ends the agent and waits for it.
func (e *Escrad) Stop() {
	e.cancel()
	e.done <- <-e.done // keep the result for a later Stop or Early
}

// Early is an error when the agent has stopped before Stop.
func (e *Escrad) Early() error {
	select {
	case err := <-e.done:
		e.done <- err
		return fmt.Errorf("agent stopped early: %v", err)
	default:
		return nil
	}
}

// Counter is the value of one of the agent's Prometheus counters (summed
// over its labels); an error when the agent has no counter of that name.
func (e *Escrad) Counter(name string) (float64, error) {
	mfs, err := e.a.Registry().Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
		return v, nil
	}
	return 0, fmt.Errorf("escrad has no counter %s", name)
}
