package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Adopter is a Scaler that lists the replicas a previous gateway left
// running (it crashed or was killed before removing them), so that a
// restarted gateway serves with them rather than colliding with their
// names and ports. A Replica with no Addr is a leftover to remove.
type Adopter interface {
	Existing(ctx context.Context, f *Function) ([]Replica, error)
}

// Adopt takes over the replicas a previous gateway left running, when the
// scaler can list them (Adopter): each that answers its health check
// within AdoptTimeout joins the pool at once, the others are removed.
// Call it before serving, so that no new replica takes a leftover's port.
// The autoscaler then sizes the function from its load as usual.
func (g *Gateway) Adopt(ctx context.Context) error {
	ad, ok := g.scaler.(Adopter)
	if !ok {
		return nil
	}
	var errs []error
	var wg sync.WaitGroup
	for _, name := range g.order {
		st := g.fns[name]
		reps, err := ad.Existing(ctx, &st.spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("function %s: listing its replicas: %w", name, err))
			continue
		}
		for _, rep := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rep.Addr != "" && waitReady(ctx, g.tr, rep.Addr, g.AdoptTimeout) == nil {
					st.mu.Lock()
					st.join(rep)
					st.mu.Unlock()
					g.log.Info("gateway: adopted a running replica", "function", name, "replica", rep.ID, "addr", rep.Addr)
					return
				}
				g.log.Warn("gateway: removing a replica left by an earlier gateway that does not answer", "function", name, "replica", rep.ID)
				if err := g.scaler.Remove(ctx, &st.spec, rep.ID); err != nil {
					g.log.Warn("gateway: leftover replica not removed", "function", name, "replica", rep.ID, "err", err)
				}
			}()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
