package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/store"
)

// ErrStore wraps a failure to write the desired state: the change was
// not applied either (DefineApp, RemoveApp store first).
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
	// One bad record is skipped with an alarm: failing the load would make
	// every candidate step down in turn, a fail-over loop with no leader.
	var bad *store.BadRecordsError
	if errors.As(err, &bad) {
		for _, b := range bad.Bad {
			s.badRecord(b.Key, b.Err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("%w: load: %v", ErrStore, err)
	}
	var names []string
	for _, r := range recs {
		if err := s.defineApp(r.Spec); err != nil {
			s.badRecord(r.Spec.Name, err)
			continue
		}
		names = append(names, r.Spec.Name)
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

// badRecord logs and counts a stored record that is skipped at load; the
// operator deletes or rewrites it (escractl delete, apply).
func (s *Server) badRecord(key string, err error) {
	s.met.storeBad.Inc()
	s.log.Error("stored record skipped: it defines no app (apply the app again, or delete the key)", "key", key, "err", err)
}

// update changes name's record with f, compare-and-swap on its revision
// (store.Store.Update); prev is the record before.
func (s *Server) update(name string, f func(r *store.Record)) (prev store.Record, existed bool, err error) {
	if s.cfg.Store == nil {
		return prev, false, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	prev, existed, err = s.cfg.Store.Update(ctx, name, func(r *store.Record, _ bool) error { f(r); return nil })
	if err != nil {
		return prev, existed, fmt.Errorf("%w: app %s not stored, so not changed: %v", ErrStore, name, err)
	}
	return prev, existed, nil
}

func (s *Server) storeSpec(spec AppSpec) (store.Record, bool, error) {
	return s.update(spec.Name, func(r *store.Record) { r.Spec = spec })
}

// unstore puts back the record an applied-second change replaced, when
// applying it failed after all (a member joined in between).
func (s *Server) unstore(name string, prev store.Record, existed bool) {
	if s.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	var err error
	if existed {
		err = s.cfg.Store.Put(ctx, prev)
	} else {
		err = s.cfg.Store.Delete(ctx, name)
	}
	if err != nil {
		s.log.Error("a change stored but not applied could not be taken back from the store", "app", name, "err", err)
	}
}

func (s *Server) storeDeploy(app string, req adminapi.DeployRequest) error {
	s.mu.Lock()
	if s.apps[app] != nil {
		s.deployed[app] = req
	}
	s.mu.Unlock()
	_, _, err := s.update(app, func(r *store.Record) {
		if r.Spec.Name == "" {
			// Deployed into an app defined before the store had it.
			if a := s.appSpec(app); a != nil {
				r.Spec = *a
			}
		}
		r.Deploy = &req
	})
	return err
}

func (s *Server) storeDelete(app string) error {
	if s.cfg.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	if err := s.cfg.Store.Delete(ctx, app); err != nil {
		return fmt.Errorf("%w: app %s not deleted from the store, so not deleted: %v", ErrStore, app, err)
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
