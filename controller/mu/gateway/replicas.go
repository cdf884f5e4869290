package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/escra-dev/escra/controller/placement"
)

// kick starts a scale-up to at least one replica at once (first request).
func (g *Gateway) kick(st *fn) {
	st.mu.Lock()
	need := len(st.ready)+st.pending == 0
	if need {
		st.pending++
		st.desired = max(st.desired, 1)
	}
	st.mu.Unlock()
	if need {
		g.wg.Add(1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			host := g.firstHost(ctx, st)
			cancel()
			g.addOne(st, host)
		}()
	}
}

// firstHost is where a function's first replica goes, chosen outside the
// epoch for a held request: the node selection's pick for one pod (no DRF:
// nothing to share yet), or "" for the controller's deployer when no node
// selection is set or the cluster view is unavailable.
func (g *Gateway) firstHost(ctx context.Context, st *fn) string {
	if g.nodeSelect == nil {
		return ""
	}
	nodes, err := g.scaler.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return ""
	}
	placed := placement.PlaceDRF(g.nodeSelect, []*placement.Demand{{App: st.spec.Name, Image: st.spec.Image,
		CPU: st.spec.CPUCores, Memory: st.spec.MemoryBytes, Pods: 1}}, nodes)
	if len(placed) == 0 {
		return ""
	}
	return placed[0].Node.Name
}

// startAdds starts n replicas of st (none when n ≤ 0), the first ones
// on hosts in order and the rest where the controller's deployer puts
// them. The caller has counted them in st.pending.
func (g *Gateway) startAdds(st *fn, n int, hosts []string) {
	for i := range max(n, 0) {
		host := ""
		if i < len(hosts) {
			host = hosts[i]
		}
		g.wg.Add(1)
		go g.addOne(st, host)
	}
}

func (g *Gateway) addOne(st *fn, host string) {
	defer g.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), g.ReadyTimeout+60*time.Second)
	defer cancel()
	rep, err := g.scaler.Add(ctx, &st.spec, host)
	if err != nil && host != "" && ctx.Err() == nil {
		// The controller's view moved since the epoch's snapshot (the
		// host filled up or left): a replica elsewhere beats none.
		g.log.Warn("gateway: chosen host refused the replica, letting the controller place it", "function", st.spec.Name, "host", host, "err", err)
		host = ""
		rep, err = g.scaler.Add(ctx, &st.spec, host)
	}
	if err == nil {
		err = waitReady(ctx, g.tr, rep.Addr, g.ReadyTimeout)
		if err != nil {
			g.scaler.Remove(context.Background(), &st.spec, rep.ID)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.pending--
	if err != nil {
		g.log.Warn("gateway: replica not added", "function", st.spec.Name, "host", host, "err", err)
		return
	}
	st.join(rep)
	g.log.Info("gateway: replica ready", "function", st.spec.Name, "replica", rep.ID, "addr", rep.Addr)
}

func waitReady(ctx context.Context, tr http.RoundTripper, addr string, d time.Duration) error {
	c := &http.Client{Transport: tr, Timeout: time.Second}
	deadline := time.Now().Add(d)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/mu/healthz", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("replica at %s did not answer within %s", addr, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *Gateway) removeOne(st *fn, id string) {
	defer g.wg.Done()
	// Already out of the pool: let requests sent to it finish first
	// (bounded by the SLO), then remove the container.
	time.Sleep(min(st.spec.SLO, 2*time.Second))
	err := g.scaler.Remove(context.Background(), &st.spec, id)
	st.mu.Lock()
	st.removing--
	st.mu.Unlock()
	if err != nil {
		g.log.Warn("gateway: replica not removed", "function", st.spec.Name, "replica", id, "err", err)
	}
}
