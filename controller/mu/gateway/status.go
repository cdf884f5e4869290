package gateway

import (
	"github.com/escra-dev/escra/controller/mu"
)

// Status is one function's state for /v1/functions and `escractl top`.
type Status struct {
	Name          string            `json:"name"`
	Autoscaler    string            `json:"autoscaler"`
	LB            string            `json:"lb"`
	Ready         int               `json:"ready"`
	Pending       int               `json:"pending"`
	Desired       int               `json:"desired"`
	Ceiling       int               `json:"ceiling"`
	Capped        bool              `json:"capped"`
	Inflight      int               `json:"inflight"`
	Queued        int               `json:"queued"`
	CapacityRPS   float64           `json:"capacity_rps"`
	RateRPS       float64           `json:"rate_rps"`
	PredictedRPS  float64           `json:"predicted_rps"`
	ExecMs        float64           `json:"exec_ms"`
	Served        uint64            `json:"served"`
	Rejected      uint64            `json:"rejected"`
	Failed        uint64            `json:"failed"`
	Replicas      []mu.BackendStats `json:"replicas"`
	ObservedEpoch mu.Observation    `json:"observed_epoch"`
	NIR           int               `json:"n_ir,omitempty"`    // Mu: last Eq 1 term
	NQueue        int               `json:"n_queue,omitempty"` // Mu: last Eq 2 term
}

// Statuses returns every function's state.
func (g *Gateway) Statuses() []Status {
	var out []Status
	for _, name := range g.order {
		st := g.fns[name]
		st.mu.Lock()
		s := Status{Name: name, Autoscaler: st.spec.Autoscaler, LB: st.spec.LB, Ready: len(st.ready), Pending: st.pending,
			Desired: st.desired, Ceiling: st.ceiling, Capped: st.capped, Inflight: st.inflight, PredictedRPS: st.predRate,
			ExecMs: st.etEWMA * 1000, Served: st.served, Rejected: st.rejected, Failed: st.failed, ObservedEpoch: st.lastObs,
			RateRPS: st.lastObs.Rate(), NIR: st.nIR, NQueue: st.nQ}
		st.mu.Unlock()
		s.Queued = st.pool.Queued()
		s.CapacityRPS = st.pool.Capacity()
		s.Replicas = st.pool.Stats()
		out = append(out, s)
	}
	return out
}
