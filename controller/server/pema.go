package server

import (
	"fmt"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/app"
	"github.com/escra-dev/escra/controller/pema"
	"github.com/escra-dev/escra/controller/pemaloop"
	"github.com/escra-dev/escra/controller/store"
)

type pemaRef struct {
	app  *app.App
	loop *pemaloop.Loop
}

// startPEMA starts the pema policy's loop and proxy for a new app
// (called under s.mu); the app stops them when it stops. The RHDb goes
// into the controller's bbolt store when there is one.
func (s *Server) startPEMA(a *app.App, tg *allocator.Targets, spec AppSpec) error {
	if spec.SLO == nil {
		return fmt.Errorf("app %s: policy %s needs an slo", spec.Name, tg.Name())
	}
	c, rc, err := spec.SLO.PEMA()
	if err != nil {
		return fmt.Errorf("app %s: %w", spec.Name, err)
	}
	if tg.Guarded() {
		g := pema.DefaultGuard()
		c.Guard = &g
	}
	cfg := pemaloop.Config{App: spec.Name, Interval: spec.SLO.Interval, MinRequests: spec.SLO.MinRequests,
		PEMA: c, Ranges: rc, Seed: spec.SLO.Seed, Listen: spec.SLO.Listen, Upstream: spec.SLO.Upstream}
	if cfg.Interval == 0 {
		cfg.Interval = pemaloop.DefaultInterval
	}
	if cfg.MinRequests == 0 {
		cfg.MinRequests = pemaloop.DefaultMinRequests
	}
	var newDB pemaloop.DB
	if lg, ok := s.cfg.Store.(store.Logger); ok {
		newDB = func(id int) (pema.RHDb, error) {
			l, err := lg.Log(fmt.Sprintf("pema/%s/%d", spec.Name, id))
			if err != nil {
				return nil, err
			}
			return pema.NewLogDB(l)
		}
	}
	l, err := pemaloop.Start(cfg, a, tg, newDB, s.log)
	if err != nil {
		return fmt.Errorf("app %s: %w", spec.Name, err)
	}
	if s.pema == nil {
		s.pema = map[string]pemaRef{}
	}
	s.pema[spec.Name] = pemaRef{app: a, loop: l}
	a.OnStop(l.Close)
	return nil
}

// PEMALoop returns an app's pema loop (nil: none), for tests and the bench.
func (s *Server) PEMALoop(name string) *pemaloop.Loop {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.pema[name]; ok && s.apps[name] == r.app {
		return r.loop
	}
	return nil
}
