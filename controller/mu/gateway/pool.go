package gateway

import (
	"net/http"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// activate is the gateway's cold path, as Knative's activator: until a
// replica of the function has answered once, nothing is known of its
// speed, so a request goes only to a replica with a free concurrency slot
// and otherwise waits here (for a slot, a new replica or a first answer),
// rather than joining one replica's queue while later replicas stand
// idle. It returns the replica it sent the request to, or nil once the
// function's speed is known (the caller then applies admission and the
// load balancer) or the hold timed out.
func (g *Gateway) activate(st *fn, r *http.Request, arrived time.Time) *mu.Backend {
	if st.spec.Concurrency < 1 {
		return nil
	}
	var t *time.Timer
	for !st.pool.Known() {
		st.mu.Lock()
		slot := st.slot
		st.mu.Unlock()
		if b := st.pool.PickFree(); b != nil {
			return b
		}
		if t == nil {
			t = time.NewTimer(max(g.HoldTimeout-g.now().Sub(arrived), 0))
			defer t.Stop()
		}
		select {
		case <-slot:
		case <-t.C:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
	return nil
}

// freed wakes requests waiting in activate.
func (st *fn) freed() {
	st.mu.Lock()
	close(st.slot)
	st.slot = make(chan struct{})
	st.mu.Unlock()
}

// join puts a ready replica in the pool and wakes the requests waiting
// for one (scale from zero, activate). The caller holds st.mu.
func (st *fn) join(rep Replica) {
	st.ready[rep.ID] = rep
	st.pool.Add(rep.ID, rep.Addr)
	close(st.wake)
	st.wake = make(chan struct{})
	close(st.slot)
	st.slot = make(chan struct{})
}
