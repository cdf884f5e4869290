package gateway

import (
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// Admission modes (Function.Admission).
const (
	AdmitSLO    = "slo"
	AdmitCapped = "capped"
	AdmitOff    = "off"
)

// AdmissionModes lists the values Function.Admission takes.
var AdmissionModes = []string{AdmitSLO, AdmitCapped, AdmitOff}

// AdmissionMode is the function's admission with the default applied.
func (f *Function) AdmissionMode() string {
	switch {
	case f.Admission != "":
		return f.Admission
	case f.Autoscaler == mu.ASMu || f.Autoscaler == mu.ASMuNoPred:
		return AdmitSLO
	}
	return AdmitOff
}

// reject is Mu's admission (§4.1): a request whose best estimated
// response time, min_i (Q_i+1)/Cap_i (Eq 5), already exceeds the SLO is
// refused rather than queued behind requests that will miss it too. The
// paper's 503s come "when resources are not yet provisioned" during
// bursts, not only at the budget, so by default it applies whenever the
// queues are that long; "capped" keeps it to a function capped below N_des.
func (g *Gateway) reject(st *fn, waited time.Duration) bool {
	st.mu.Lock()
	capped := st.capped
	st.mu.Unlock()
	best, ok := st.pool.BestResponse()
	return Refuses(st.spec.AdmissionMode(), capped, best, ok, st.spec.SLO-waited)
}

// Refuses is the admission rule itself, shared with the benchmark's
// replay: under mode (capped: whether the budget holds the function below
// N_des), a request is refused when the best estimated response, best s
// (ok: an estimate exists), exceeds what is left of its SLO.
func Refuses(mode string, capped bool, best float64, ok bool, left time.Duration) bool {
	switch mode {
	case AdmitOff:
		return false
	case AdmitCapped:
		if !capped {
			return false
		}
	}
	return ok && best > left.Seconds()
}
