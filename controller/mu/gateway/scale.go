package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

// Prescale starts each function's InitialScale replicas, where the
// budget and the node selection allow, and waits until they are ready or
// ctx ends: the function meets its first requests warm. Replicas already
// there (adopted) count. Call it before Run.
func (g *Gateway) Prescale(ctx context.Context) error {
	want := map[string]int{}
	short := false
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		cur := len(st.ready) + st.pending
		want[name] = max(st.spec.InitialScale, cur)
		short = short || st.spec.InitialScale > cur
		st.mu.Unlock()
	}
	if !short {
		return nil // nothing to start: no round trip to the controller
	}
	granted, hosts := g.grant(ctx, want)
	target := map[string]int{}
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		add := granted[name] - (len(st.ready) + st.pending)
		if add > 0 {
			st.pending += add
			st.desired = max(st.desired, granted[name])
		}
		target[name] = len(st.ready) + st.pending
		st.mu.Unlock()
		g.startAdds(st, add, hosts[name])
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var errs []error
		waiting := false
		for _, name := range g.order {
			st := g.fns[name]
			st.mu.Lock()
			ready, pending := len(st.ready), st.pending
			st.mu.Unlock()
			switch {
			case ready >= target[name]:
			case pending > 0:
				waiting = true
			default:
				errs = append(errs, fmt.Errorf("function %s: %d of %d initial replicas ready", name, ready, st.spec.InitialScale))
			}
		}
		if !waiting {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("initial scale: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Tick is one autoscaling epoch over every function.
func (g *Gateway) Tick(ctx context.Context) {
	now := g.now()
	want := map[string]int{}
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		st.track(now, 0)
		el := g.epoch.Seconds()
		o := mu.Observation{
			Ready:       len(st.ready) + st.pending,
			Arrivals:    st.arrivals,
			EpochSec:    el,
			Concurrency: st.area / el,
			Queued:      float64(st.pool.Queued() + st.held),
			CapE:        st.pool.Capacity(),
			ExecSec:     st.etEWMA,
		}
		st.arrivals, st.area = 0, 0
		st.lastObs = o
		st.mu.Unlock()
		d := st.as.Desired(o)
		if m, ok := st.as.(*mu.MuAutoscaler); ok {
			st.mu.Lock()
			st.predRate = m.Predicted()
			st.nIR, st.nQ = m.Terms()
			st.mu.Unlock()
		}
		if st.spec.MaxReplicas > 0 {
			d = min(d, st.spec.MaxReplicas)
		}
		d = max(d, st.spec.MinReplicas)
		want[name] = d
	}
	granted, hosts := g.grant(ctx, want)
	for _, name := range g.order {
		st := g.fns[name]
		g.reconcile(st, want[name], granted[name], hosts[name])
	}
	g.fairness(ctx, want)
}

// grant caps each function by its app budget and, when the cluster cannot
// hold every function's growth, shares the room by DRF (Algorithm 3). The
// hosts are the nodes Algorithm 3's node selection chose for each granted
// new replica, in order (none when the controller's deployer places).
func (g *Gateway) grant(ctx context.Context, want map[string]int) (map[string]int, map[string][]string) {
	out := map[string]int{}
	var ds []*placement.Demand
	for _, name := range g.order {
		st := g.fns[name]
		c, err := g.scaler.Ceiling(ctx, &st.spec)
		if err != nil {
			g.log.Warn("gateway: budget unknown", "function", name, "err", err)
			st.mu.Lock()
			c = len(st.ready) + st.pending
			st.mu.Unlock()
		}
		st.mu.Lock()
		st.ceiling = c
		cur := len(st.ready) + st.pending
		st.mu.Unlock()
		out[name] = min(want[name], c)
		if extra := out[name] - cur; extra > 0 {
			ds = append(ds, &placement.Demand{App: name, CPU: st.spec.CPUCores, Memory: st.spec.MemoryBytes,
				Pods: extra, AllocCPU: float64(cur) * st.spec.CPUCores, AllocMem: int64(cur) * st.spec.MemoryBytes})
		}
	}
	if len(ds) == 0 {
		return out, nil
	}
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return out, nil
	}
	// Which function gets the room is DRF's either way; where each
	// replica goes is the node heuristic's only if one is set.
	prof := g.nodeSelect
	if prof == nil {
		prof = defaultNodeProfile()
	}
	placed := placement.PlaceDRF(prof, ds, nodes)
	var hosts map[string][]string
	if g.nodeSelect != nil {
		hosts = map[string][]string{}
		for _, p := range placed {
			hosts[p.App] = append(hosts[p.App], p.Node.Name)
		}
	}
	for _, d := range ds {
		st := g.fns[d.App]
		st.mu.Lock()
		cur := len(st.ready) + st.pending
		st.mu.Unlock()
		out[d.App] = cur + d.Placed
	}
	return out, hosts
}

func (g *Gateway) reconcile(st *fn, want, granted int, hosts []string) {
	st.mu.Lock()
	cur := len(st.ready) + st.pending
	st.desired = want
	st.capped = granted < want
	add := granted - cur
	var drop []string
	if granted < cur && st.pending == 0 {
		// Remove the slowest replicas first (§3.4.1).
		// cur already leaves out replicas being removed.
		for k := cur - granted; k > 0; k-- {
			id := st.pool.Slowest()
			if id == "" || len(st.ready) == 0 {
				break
			}
			delete(st.ready, id)
			st.pool.Remove(id)
			drop = append(drop, id)
		}
	}
	st.pending += max(add, 0)
	st.removing += len(drop)
	st.mu.Unlock()
	g.startAdds(st, add, hosts)
	for _, id := range drop {
		g.wg.Add(1)
		go g.removeOne(st, id)
	}
}
