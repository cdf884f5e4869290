package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/session"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// Register adds a container to its app (auto-creating the app).
func (s *Server) Register(ss *session.Session, r *pb.ContainerRegister) error {
	h := s.host(ss.ID)
	if h == nil {
		return errors.New("register before hello")
	}
	if len(r.GetContainerId()) > 128 || len(r.GetName()) > 256 {
		return errors.New("register: oversized container id or name")
	}
	h.mu.RLock()
	_, dup := h.cont.get(r.GetHandle())
	n := h.cont.len()
	h.mu.RUnlock()
	if dup {
		return fmt.Errorf("register: handle %d already registered on this session", r.GetHandle())
	}
	if limit := s.cfg.MaxContainersPerHost; limit > 0 && n >= limit {
		s.met.bad("too_many_containers", 1)
		return fmt.Errorf("register: host %s already has %d containers registered, the controller's --max-containers-per-host", h.hello.GetHostId(), limit)
	}
	if err := s.checkScope(ss.ID, h, r); err != nil {
		return err
	}
	joined := false
	defer func() {
		if !joined {
			s.releaseID(ss.ID, r.GetContainerId())
		}
	}()
	lim := r.GetLimits()
	pUs := float64(s.cfg.Params.PeriodUs())
	cores := float64(h.maxUs) / pUs
	if q, p := lim.GetCpuQuotaUs(), lim.GetCpuPeriodUs(); q > 0 && p > 0 {
		cores = min(float64(q)/float64(p), cores)
	}
	mem := lim.GetMemoryLimitBytes()
	if mem <= 0 || mem > 1<<50 {
		mem = int64(min(h.hello.GetMemoryBytes(), 1<<50))
		if mem <= 0 {
			mem = s.cfg.DefaultHostMemoryBytes
		}
	}
	mem = max(mem, 4*allocator.MiB)
	// What the cgroup holds now (counted until replaced and acknowledged;
	// a rejoining container keeps it when it fits, allocator.Join).
	var curQ, curM int64
	if q, p := lim.GetCpuQuotaUs(), lim.GetCpuPeriodUs(); q > 0 && p > 0 {
		curQ = q * s.cfg.Params.PeriodUs() / int64(p)
	} else if q < 0 {
		curQ = h.maxUs // unlimited: it may use the whole host
	}
	if m := lim.GetMemoryLimitBytes(); m > 0 && m <= 1<<50 {
		curM = m
	}
	// Its own limits, held while its host is silent (allocator/hold.go):
	// -1 (none) stays -1, a quota is put in the allocator's period, unset
	// (an older daemon) is 0, unknown.
	var ownQ, ownM int64
	if o := r.GetOwn(); o != nil {
		ownQ, ownM = -1, -1
		if q, p := o.GetCpuQuotaUs(), o.GetCpuPeriodUs(); q > 0 && p > 0 {
			ownQ = q * s.cfg.Params.PeriodUs() / int64(p)
		}
		if m := o.GetMemoryLimitBytes(); m > 0 && m <= 1<<50 {
			ownM = m
		}
	}
	k := key(ss.ID, r.GetHandle())
	mi := app.MemberInfo{Key: k, Host: ss, HostID: h.hello.GetHostId(), Handle: r.GetHandle(),
		ContainerID: r.GetContainerId(), Name: r.GetName(), HostMaxUs: h.maxUs,
		MemUsage: int64(min(r.GetMemoryUsageBytes(), 1<<50)), ContribCores: cores, ContribMem: mem,
		CurQuotaUs: curQ, CurMem: curM, OwnQuotaUs: ownQ, OwnMem: ownM}
	var a *app.App
	for try := 0; ; try++ {
		var err error
		if a, err = s.appFor(r.GetApp(), cores, mem); err != nil {
			return err
		}
		err = a.Join(mi)
		if err == nil {
			break
		}
		// The auto app emptied just now: it is forgotten, make it anew.
		if !errors.Is(err, app.ErrRetired) || try == 3 {
			return err
		}
		s.forget(a)
	}
	h.mu.Lock()
	h.cont.set(r.GetHandle(), ref{app: a, key: k, appName: r.GetApp(), id: r.GetContainerId()})
	h.mu.Unlock()
	joined = true
	return nil
}

// Unregister removes a container.
func (s *Server) Unregister(ss *session.Session, u *pb.ContainerUnregister) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	h.mu.Lock()
	r, ok := h.cont.get(u.GetHandle())
	h.cont.del(u.GetHandle())
	h.mu.Unlock()
	if !ok {
		s.BadInput(ss, "unknown_container", fmt.Errorf("unregister of unknown handle %d", u.GetHandle()))
		return
	}
	s.releaseID(ss.ID, r.id)
	r.app.Leave(r.key, u.GetReason())
	s.reap(r.app)
}

// MemoryUsage routes usage samples.
func (s *Server) MemoryUsage(ss *session.Session, m *pb.MemoryUsage) {
	h := s.host(ss.ID)
	if h == nil {
		return
	}
	for _, smp := range m.GetSamples() {
		h.mu.RLock()
		r, ok := h.cont.get(smp.GetHandle())
		h.mu.RUnlock()
		if !ok {
			s.met.bad("unknown_container", 1)
			continue
		}
		if smp.GetUsageBytes() > 1<<50 {
			s.met.bad("absurd", 1)
			continue
		}
		r.app.Usage(r.key, int64(smp.GetUsageBytes()))
	}
}

// containerRef is the container the session registered under handle, or
// nil.
func (s *Server) containerRef(ss *session.Session, handle uint32) *ref {
	h := s.host(ss.ID)
	if h == nil {
		return nil
	}
	h.mu.RLock()
	r, ok := h.cont.get(handle)
	h.mu.RUnlock()
	if !ok {
		return nil
	}
	return &r
}

// OOM routes a blocking OOM request to its app.
func (s *Server) OOM(ss *session.Session, id uint64, o *pb.OomRequest, recv time.Time) {
	r := s.containerRef(ss, o.GetHandle())
	if r == nil {
		s.BadInput(ss, "unknown_container", fmt.Errorf("oom request for unknown handle %d", o.GetHandle()))
		ss.Verdict(id, &pb.OomVerdict{Handle: o.GetHandle(), Granted: false, Reason: "unknown container"}, recv)
		return
	}
	r.app.OOM(r.key, id, o, recv)
}

// LeaseUse implements session.LeaseHandler (host-local leases):
// the daemon raised a container's quota from its lease. A use naming an
// app, lease or container this session does not have is dropped and
// counted.
func (s *Server) LeaseUse(ss *session.Session, u *pb.CpuLeaseUse) {
	r := s.containerRef(ss, u.GetHandle())
	if r == nil || r.appName != u.GetApp() {
		s.BadInput(ss, "lease_unknown", fmt.Errorf("lease use for unknown container %d of app %q", u.GetHandle(), u.GetApp()))
		return
	}
	bad := func(reason string, err error) { s.BadInput(ss, reason, err) }
	r.app.LeaseUse(allocator.HostID(ss.ID), u.GetLeaseId(), r.key, u.GetAmountUs(), bad)
}

// LeaseReturn implements session.LeaseHandler: the answer to a revoke.
func (s *Server) LeaseReturn(ss *session.Session, lr *pb.CpuLeaseReturn) {
	s.mu.RLock()
	a := s.apps[lr.GetApp()]
	s.mu.RUnlock()
	if a == nil || s.host(ss.ID) == nil {
		s.BadInput(ss, "lease_unknown", fmt.Errorf("lease return for unknown app %q", lr.GetApp()))
		return
	}
	a.LeaseReturn(allocator.HostID(ss.ID), lr.GetLeaseId(), func(reason string, err error) { s.BadInput(ss, reason, err) })
}
