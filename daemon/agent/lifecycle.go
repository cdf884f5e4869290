package agent

import (
	"slices"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/daemon/rescue"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func (a *Agent) handle(ev containers.Event) {
	switch ev.Kind {
	case containers.Started:
		a.mu.Lock()
		old := a.byID[ev.Container.ID]
		a.mu.Unlock()
		if old != nil {
			if old.c.Pid == ev.Container.Pid {
				return // relisted after a reconnect: nothing changed
			}
			a.remove(old, "restarted")
		}
		a.add(ev.Container)
	case containers.Stopped:
		a.mu.Lock()
		m := a.byID[ev.ID]
		a.mu.Unlock()
		if m != nil {
			a.remove(m, "stopped")
		}
	case containers.Synced:
		a.mu.Lock()
		var gone []*managed
		for id, m := range a.byID {
			if m.c.Docker && !ev.Live[id] {
				gone = append(gone, m)
			}
		}
		a.mu.Unlock()
		for _, m := range gone {
			a.remove(m, "gone after engine reconnect")
		}
	}
}

func (a *Agent) add(c containers.Container) {
	if len(a.cfg.Apps) > 0 && !slices.Contains(a.cfg.Apps, c.App) {
		a.log.Debug("not managing container of another app", "name", c.Name, "app", c.App)
		return
	}
	var p cgroups.Paths
	var err error
	if c.Pid > 0 {
		p, err = cgroups.PathsForPID(c.Pid)
	} else {
		p, err = cgroups.PathsForCgroup(c.CgroupPath)
	}
	if err != nil {
		a.log.Warn("skipping container: cgroup not found", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	g, err := cgroups.Open(p)
	if err != nil {
		a.log.Warn("skipping container: cgroup files", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	e, err := limits.NewEntry(c.ID, c.Docker, g)
	if err != nil {
		g.Close()
		a.log.Warn("skipping container: cgroup limits", "name", c.Name, "id", short(c.ID), "err", err)
		return
	}
	e.DockerNanoCPUs.Store(c.Docker && c.Limits.NanoCPUs > 0)
	m := &managed{c: c, g: g, e: e}
	m.orig, _ = e.Current()
	if c.Docker {
		m.orig = dockerLimits(c.Limits, m.orig)
	}
	if p.Version == cgroups.V2 {
		var st unix.Stat_t
		if unix.Stat(p.Unified, &st) == nil {
			m.cgID = st.Ino
		}
	}
	a.mu.Lock()
	a.nextH++
	m.h = a.nextH
	m.oom = &rescue.Container{H: m.h, Name: c.Name, App: c.App, G: g, Mem: e, Ceiling: m.orig.MemoryBytes}
	a.byID[c.ID], a.byH[m.h] = m, m
	a.rescue.Add(m.oom)
	a.mu.Unlock()
	a.app.Add(m.h, e)
	if a.cpu != nil {
		cur, _ := e.Current()
		a.cpu.add(m.h, c, cur)
	}
	if err := a.src.Watch(m.h, g); err != nil {
		a.log.Warn("container managed without OOM trap", "name", c.Name, "err", err)
	}
	m.oom.Armed.Store(true)
	a.log.Info("managing container", "name", c.Name, "id", short(c.ID), "app", c.App, "handle", m.h, "cgroup", p.Key())
	_ = a.link.Register(a.registration(m))
}

func (a *Agent) remove(m *managed, why string) {
	a.mu.Lock()
	if a.byID[m.c.ID] == m {
		delete(a.byID, m.c.ID)
	}
	delete(a.byH, m.h)
	a.rescue.Remove(m.h)
	a.mu.Unlock()
	a.src.Unwatch(m.h)
	if a.cpu != nil {
		a.cpu.remove(m.h)
	}
	a.app.Remove(m.h)
	m.g.Close()
	a.log.Info("container no longer managed", "name", m.c.Name, "id", short(m.c.ID), "why", why)
	_ = a.link.Unregister(&pb.ContainerUnregister{Handle: m.h, ContainerId: m.c.ID, Reason: why})
}

func (a *Agent) registration(m *managed) *pb.ContainerRegister {
	cur, _ := m.e.Current()
	usage, _ := m.g.ReadInt(cgroups.MemUsage)
	return &pb.ContainerRegister{
		Handle: m.h, ContainerId: m.c.ID, Name: m.c.Name, App: m.c.App, CgroupId: m.cgID,
		CgroupPath: m.g.Paths.Key(), MemoryUsageBytes: uint64(max(usage, 0)),
		Limits: &pb.Limits{CpuQuotaUs: cur.CPUQuotaUs, CpuPeriodUs: cur.CPUPeriodUs, MemoryLimitBytes: cur.MemoryBytes, CpusetCpus: cur.CpusetCpus},
		// What restoreLoop puts back and the outage path raises memory up
		// to: the controller holds at least this while the host is silent.
		Own: &pb.Limits{CpuQuotaUs: m.orig.CPUQuotaUs, CpuPeriodUs: m.orig.CPUPeriodUs, MemoryLimitBytes: m.orig.MemoryBytes},
	}
}

func (a *Agent) list() []*managed {
	a.mu.Lock()
	defer a.mu.Unlock()
	ms := make([]*managed, 0, len(a.byH))
	for _, m := range a.byH {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].h < ms[j].h })
	return ms
}

// Managed lists the containers whose telemetry and OOM trap are set up,
// ids by handle (tests, benchmarks).
func (a *Agent) Managed() map[uint32]string {
	out := map[uint32]string{}
	for _, m := range a.list() {
		if m.oom.Armed.Load() {
			out[m.h] = m.c.ID
		}
	}
	return out
}

// IsManaged reports whether container id is managed with its trap set.
func (a *Agent) IsManaged(id string) bool {
	a.mu.Lock()
	m := a.byID[id]
	a.mu.Unlock()
	return m != nil && m.oom.Armed.Load()
}

// Registrations implements link.Handler. Only containers whose telemetry
// and OOM trap are set up are listed (add registers the others itself once
// they are): a session that came up in the middle of add registered the
// container early, and the controller's first memory limit then reached a
// v2 group before its brake was watched, so memory.high never followed it
// (vm-test cgroupfs-oom-grant, once under two busy loops).
func (a *Agent) Registrations() []*pb.ContainerRegister {
	ms := a.list()
	out := make([]*pb.ContainerRegister, 0, len(ms))
	for _, m := range ms {
		if m.oom.Armed.Load() {
			out = append(out, a.registration(m))
		}
	}
	return out
}
