package server

import (
	"fmt"
	"slices"
	"sort"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/internal/names"
)

// appList is every app, by name.
func (s *Server) appList() []*app.App {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*app.App, 0, len(s.apps))
	for _, a := range s.apps {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Server) policy(name string) allocator.Policy {
	if s.cfg.Policy != nil {
		return s.cfg.Policy(name)
	}
	return nil
}

// DefineApp creates an app or replaces its budget, and stores it
// (Config.Store). Parameters can change only while the app has no members.
func (s *Server) DefineApp(spec AppSpec) error {
	if err := s.defineApp(spec); err != nil {
		return err
	}
	return s.storeSpec(spec)
}

// defineApp is DefineApp in memory only.
func (s *Server) defineApp(spec AppSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	b := allocator.Budget{CPUCores: spec.CPUCores, MemoryBytes: spec.MemoryBytes, Sigma: spec.Sigma}
	p := spec.EffectiveParams(s.cfg.Params)
	if err := p.Validate(); err != nil {
		return fmt.Errorf("app %s: %w", spec.Name, err)
	}
	pol := s.policy(spec.Name)
	if spec.Policy != "" {
		pol, _ = allocator.PolicyByName(spec.Policy) // checked by Validate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[spec.Name]; a != nil {
		st := a.Snapshot()
		if st.Params != p || (pol != nil && st.Policy != pol.Name()) {
			if len(st.Members) > 0 {
				return fmt.Errorf("app %s: parameters and policy can change only while it has no members", spec.Name)
			}
			a.Stop()
			delete(s.apps, spec.Name)
		} else {
			if l := s.pema[spec.Name]; l.app == a && l.loop != nil && spec.SLO != nil {
				if err := l.loop.SetSLO(spec.SLO.P95.Seconds()); err != nil {
					return err
				}
			}
			if err := a.Define(b); err != nil {
				return err
			}
			a.Configure(spec.Recommending(), capsOf(spec))
			s.docs[spec.Name] = spec.Spec
			return nil
		}
	}
	a, err := app.New(spec.Name, b, p, pol, false, s.log, &s.hub, s.met)
	if err != nil {
		return err
	}
	a.Configure(spec.Recommending(), capsOf(spec))
	if tg, ok := pol.(*allocator.Targets); ok {
		if err := s.startPEMA(a, tg, spec); err != nil {
			a.Stop()
			return err
		}
	}
	s.apps[spec.Name] = a
	s.docs[spec.Name] = spec.Spec
	return nil
}

// capsOf finds a member's max_cpu and max_memory by its name.
func capsOf(spec AppSpec) func(name string) app.Caps {
	return func(name string) app.Caps {
		m := spec.MaxFor(name)
		return app.Caps{CPUCores: m.CPUCores, MemoryBytes: m.MemoryBytes}
	}
}

// appFor finds the app, creating an auto app (budget grows with its
// members, see docs/allocator.md) when it was never defined.
func (s *Server) appFor(name string, contribCores float64, contribMem int64) (*app.App, error) {
	s.mu.RLock()
	a := s.apps[name]
	s.mu.RUnlock()
	if a != nil {
		return a, nil
	}
	if err := names.ValidateApp(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[name]; a != nil {
		return a, nil
	}
	a, err := app.New(name, allocator.Budget{CPUCores: contribCores, MemoryBytes: contribMem}, s.cfg.Params,
		s.policy(name), true, s.log, &s.hub, s.met)
	if err != nil {
		return nil, err
	}
	s.apps[name] = a
	s.log.Info("auto-created app for an undefined escra.app label", "app", name,
		"cpu_cores", contribCores, "memory_bytes", contribMem)
	return a, nil
}

// rejoinGrace makes the apps a previous controller ran (the ones found in
// the state store) hand nothing out of their pools for RejoinGrace, at
// start and on taking over the leadership: their members' daemons still
// apply the limits it gave until they rejoin, and a host that rejoins
// first must not be raised into a share another host's cgroups hold.
// Apps new to the store (a first start, --store none, defined or
// auto-created later) had no previous controller and need none: holding
// them would deny their first OOM requests.
func (s *Server) rejoinGrace(stored []string) {
	if s.cfg.RejoinGrace <= 0 {
		return
	}
	for _, a := range s.appList() {
		if slices.Contains(stored, a.Name) {
			a.HoldRaisesFor(s.cfg.RejoinGrace)
		}
	}
}

// reap forgets an auto-created app once its last member left: its state
// and metrics go with it (a defined app stays until deleted).
func (s *Server) reap(a *app.App) {
	if a.RetireIfEmpty() {
		s.forget(a)
		s.log.Info("auto-created app emptied and deleted", "app", a.Name)
	}
}

// forget removes a retired app and stops it.
func (s *Server) forget(a *app.App) {
	s.mu.Lock()
	if s.apps[a.Name] == a {
		delete(s.apps, a.Name)
		a.Stop()
	}
	s.mu.Unlock()
}
