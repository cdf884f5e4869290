package server

import (
	"sort"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/spec"
)

// State is a snapshot of the controller for tests, the admin API and the CLI.
type State struct {
	Apps       []AppState       `json:"apps"`
	Hosts      []HostState      `json:"hosts"`
	Containers []ContainerState `json:"containers"`
}

// The admin API's element types (controller/adminapi).
type (
	AppState       = adminapi.App
	HostState      = adminapi.Host
	ContainerState = adminapi.Container
)

// Snapshot collects the state of every app and host.
func (s *Server) Snapshot() State {
	st := State{Apps: []AppState{}, Hosts: []HostState{}, Containers: []ContainerState{}}
	for _, a := range s.appList() {
		as := a.Snapshot()
		pUs := float64(as.Params.PeriodUs())
		mode := spec.ModeEnforce
		if as.Recommend {
			mode = spec.ModeRecommend
		}
		st.Apps = append(st.Apps, AppState{Name: as.Name, Auto: as.Auto, Policy: as.Policy, Mode: mode,
			CPUCores: as.Budget.CPUCores, CPUAllocatedCores: float64(as.CPUAllocatedUs) / pUs,
			CPUUnallocatedCores: float64(max(as.OmegaUs-as.CPUAllocatedUs-as.CPULeasedUs-as.CPUHeldUs, 0)) / pUs,
			CPULeasedCores:      float64(as.CPULeasedUs) / pUs,
			CPUHeldCores:        float64(as.CPUHeldUs) / pUs, MemoryHeldBytes: as.MemHeld,
			MemoryBytes: as.Budget.MemoryBytes, MemoryAllocatedBytes: as.MemAllocated,
			MemoryUnallocatedBytes: as.MemUnalloc, MemoryCreditBytes: as.MemCredited, Sigma: as.Budget.Sigma, Members: len(as.Members),
			PendingOOMs: as.PendingOOMs, Params: as.Params})
		for _, m := range as.Members {
			st.Containers = append(st.Containers, ContainerState{App: as.Name, HostID: m.Info.HostID,
				SessionID: uint32(m.Info.Key >> 32), Handle: m.Info.Handle, ContainerID: m.Info.ContainerID,
				Name: m.Info.Name, CPUQuotaUs: m.QuotaUs, CPUPeriodUs: as.Params.PeriodUs(), CPUUsageUs: m.LastUsageUs,
				MemoryLimitBytes: m.MemLimit, MemoryUsageBytes: m.MemUsage, Generation: m.Gen,
				Periods: m.Periods, ThrottledPeriods: m.Throttles, ThrottleEvents: m.ThrottleEvents, OOMRequests: m.OOMRequests,
				OOMGrants: m.OOMGrants, OOMDenials: m.OOMDenies,
				RecommendedCPUCores: float64(m.RecQuotaUs) / pUs, RecommendedMemoryBytes: m.RecMem,
				MaxCPUCores: float64(m.MaxQuotaUs) / pUs, MaxMemoryBytes: m.MaxMem})
		}
	}
	s.mu.RLock()
	for i := range st.Apps {
		st.Apps[i].Spec = s.docs[st.Apps[i].Name]
	}
	s.mu.RUnlock()
	s.hosts.Range(func(_, v any) bool {
		h := v.(*host)
		h.mu.RLock()
		n := h.cont.len()
		h.mu.RUnlock()
		st.Hosts = append(st.Hosts, HostState{HostID: h.hello.GetHostId(), SessionID: h.id, Peer: h.sess.Peer,
			Cores: h.hello.GetCores(), MemoryBytes: h.hello.GetMemoryBytes(), Backend: h.hello.GetBackend().String(),
			Kernel: h.hello.GetKernelRelease(), Containers: n, Since: h.since, LastSeen: h.sess.LastSeen(),
			TelemetryDatagrams: h.datagrams.Load()})
		return true
	})
	sort.Slice(st.Hosts, func(i, j int) bool { return st.Hosts[i].SessionID < st.Hosts[j].SessionID })
	return st
}

// Stats are the controller's own counters (controller/adminapi).
type Stats = adminapi.Stats

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{
		DecisionLatencyP50Us: s.decLat.Quantile(0.5), DecisionLatencyP99Us: s.decLat.Quantile(0.99),
		DecisionLatencyMeanUs: s.decLat.MeanUs(), Decisions: s.decLat.Count(),
		OOMVerdictP50Us: s.oomLat.Quantile(0.5), OOMVerdictP99Us: s.oomLat.Quantile(0.99), OOMVerdicts: s.oomLat.Count(),
		TelemetryDatagrams: s.udp.C.Datagrams.Load(), TelemetryStats: s.udp.C.Stats.Load(),
		TelemetryBytes: s.udp.C.Bytes.Load(), Dropped: s.met.drops(),
	}
}
