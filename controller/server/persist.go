package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/store"
)

// ErrStore wraps a failure to write the desired state: the change is in
// effect but would not survive a restart.
var ErrStore = errors.New("state store")

const storeTimeout = 5 * time.Second

// loadStore defines every stored app, in memory (it is stored already),
// and returns their names: a previous controller ran them.
func (s *Server) loadStore() ([]string, error) {
	if s.cfg.Store == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	recs, err := s.cfg.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: load: %v", ErrStore, err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Spec.Name)
		if err := s.defineApp(r.Spec); err != nil {
			return nil, fmt.Errorf("%w: stored app %s: %v", ErrStore, r.Spec.Name, err)
		}
		if r.Deploy != nil {
			s.mu.Lock()
			s.deployed[r.Spec.Name] = *r.Deploy
			s.mu.Unlock()
		}
	}
	if len(recs) > 0 {
		s.log.Info("apps restored from the state store", "apps", len(recs))
	}
	return names, nil
}

// update reads name's record, lets f change it and writes it back.
func (s *Server) update(name string, f func(r *store.Record)) error {
	if s.cfg.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	r, _, err := s.cfg.Store.Get(ctx, name)
	if err == nil {
		f(&r)
		err = s.cfg.Store.Put(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("%w: app %s is in effect but not stored: %v", ErrStore, name, err)
	}
	return nil
}

func (s *Server) storeSpec(spec AppSpec) error {
	return s.update(spec.Name, func(r *store.Record) { r.Spec = spec })
}

func (s *Server) storeDeploy(app string, req adminapi.DeployRequest) error {
	s.mu.Lock()
	if s.apps[app] != nil {
		s.deployed[app] = req
	}
	s.mu.Unlock()
	return s.update(app, func(r *store.Record) {
		if r.Spec.Name == "" {
			// Deployed into an app defined before the store had it.
			if a := s.appSpec(app); a != nil {
				r.Spec = *a
			}
		}
		r.Deploy = &req
	})
}

func (s *Server) storeDelete(app string) error {
	if s.cfg.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	if err := s.cfg.Store.Delete(ctx, app); err != nil {
		return fmt.Errorf("%w: app %s is deleted but still stored: %v", ErrStore, app, err)
	}
	return nil
}

// appSpec is the spec of a defined app as it runs (nil: unknown).
func (s *Server) appSpec(name string) *AppSpec {
	for _, a := range s.Snapshot().Apps {
		if a.Name == name {
			p := a.Params
			return &AppSpec{Name: a.Name, CPUCores: a.CPUCores, MemoryBytes: a.MemoryBytes, Sigma: a.Sigma, Params: &p, Policy: a.Policy, Spec: a.Spec}
		}
	}
	return nil
}

// storeStatus is 503 for a store failure, else def.
func storeStatus(err error, def int) int {
	if errors.Is(err, ErrStore) {
		return 503
	}
	return def
}
