package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/link"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

var errNoDocker = errors.New("this escrad manages no Docker engine (--no-docker)")

// CreateContainer implements link.Deployer (Escra §IV-A): the container
// starts with the escra.app label, so the watcher registers it.
func (a *Agent) CreateContainer(ctx context.Context, m *pb.CreateContainer) (*pb.CreateContainerResult, error) {
	if a.cfg.Docker == nil {
		return nil, errNoDocker
	}
	l := m.GetLimits()
	cs := containers.CreateSpec{
		App: m.GetApp(), Name: m.GetName(), Image: m.GetImage(), Command: m.GetCommand(), Env: m.GetEnv(),
		Network: m.GetNetwork(), CPU: m.GetCpu(),
		Limits: containers.Limits{CPUQuotaUs: l.GetCpuQuotaUs(), CPUPeriodUs: l.GetCpuPeriodUs(), MemoryBytes: l.GetMemoryLimitBytes()},
	}
	if err := containers.ValidateCPU(cs.CPU); err != nil {
		return nil, err
	}
	if (cs.CPU == containers.CPUWysiwyg || cs.CPU == containers.CPUAuto) && a.cpu != nil {
		// The container's online view, truthful from its first instruction
		// (the WYSIWYG principle; docs/wysiwyg.md). An auto
		// container gets it too: its profile may make it C1, and for C2
		// the view follows the shared pool.
		cores := 0
		if q, p := l.GetCpuQuotaUs(), l.GetCpuPeriodUs(); q > 0 && p > 0 {
			cores = int((q + int64(p) - 1) / int64(p))
		}
		view, err := PrepareView(a.cpu.viewDir, cs.Name, cores)
		if err != nil {
			return nil, fmt.Errorf("CPU view for %s: %w", cs.Name, err)
		}
		cs.Binds = []string{view + ":/sys/devices/system/cpu/online:ro"}
	}
	id, err := containers.Create(ctx, a.cfg.Docker, cs)
	var pull time.Duration
	if errors.Is(err, containers.ErrNoImage) && len(a.cfg.PullRegistries) > 0 {
		// Provisioning (dependency-aware scheduling §3.3): pull what the engine lacks, then
		// create; the pull time goes back to the controller.
		if pull, err = containers.Pull(ctx, a.cfg.Docker, m.GetImage(), a.cfg.PullRegistries); err == nil {
			a.log.Info("image pulled for the deployer", "image", m.GetImage(), "took", pull)
			id, err = containers.Create(ctx, a.cfg.Docker, cs)
		}
	}
	if err != nil {
		return nil, err
	}
	a.touchImage(m.GetImage())
	a.log.Info("container created for the deployer", "app", m.GetApp(), "name", m.GetName(), "id", id[:min(12, len(id))])
	return &pb.CreateContainerResult{ContainerId: id, Name: m.GetName(), Pulled: pull > 0, PullUs: pull.Microseconds()}, nil
}

// RemoveContainers implements link.Deployer.
func (a *Agent) RemoveContainers(ctx context.Context, m *pb.RemoveContainers) (*pb.RemoveContainersResult, error) {
	if a.cfg.Docker == nil {
		return nil, errNoDocker
	}
	ids, err := containers.Remove(ctx, a.cfg.Docker, m.GetApp(), m.GetContainerIds())
	if len(ids) > 0 {
		a.log.Info("containers removed for the deployer", "app", m.GetApp(), "n", len(ids))
	}
	if err != nil {
		return nil, err
	}
	return &pb.RemoveContainersResult{Removed: ids}, nil
}

var _ link.Deployer = (*Agent)(nil)
