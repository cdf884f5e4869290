package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// Mu answers 503 to a request that would miss the SLO behind the queues
// it sees, whether or not the budget caps the function (§4.1: the 503s
// come during bursts before new pods are up); "capped" keeps the older,
// narrower reading; the Knative baselines queue instead.
func TestAdmission(t *testing.T) {
	sc := &procScaler{ceiling: 1, work: 0}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	g.kick(st)
	g.wg.Wait()
	b := st.pool.Pick()
	if g.reject(st, 0) {
		t.Fatal("rejected before the replica had a capacity estimate")
	}
	// The replica reports 2 req/s capacity, 10 queued: (10+1)/2 s > 1 s.
	st.pool.Done(b, &mu.PodMetrics{Queue: 10, Departure: 2, Confidence: 1})
	if !g.reject(st, 0) {
		t.Fatal("a 5.5 s estimated response for a 1 s SLO was admitted, with the function not capped")
	}
	st.pool.Done(b, &mu.PodMetrics{Queue: 0, Departure: 2.5, Confidence: 1})
	if g.reject(st, 0) {
		t.Fatal("rejected with an empty queue")
	}
	// The same queue, for a request that already waited 700 ms of its 1 s
	// SLO at the gateway: (0+1)/2.5 = 400 ms more is too late.
	if !g.reject(st, 700*time.Millisecond) {
		t.Fatal("admitted a request whose wait at the gateway leaves less than its estimated response")
	}
	st.pool.Done(b, &mu.PodMetrics{Queue: 10, Departure: 3, Confidence: 1})
	st.spec.Admission = AdmitCapped
	if g.reject(st, 0) {
		t.Fatal(`admission "capped" rejected while the function was not capped`)
	}
	st.mu.Lock()
	st.capped = true
	st.mu.Unlock()
	if !g.reject(st, 0) {
		t.Fatal(`admission "capped" admitted a late request while capped`)
	}
	st.spec.Admission = AdmitOff
	if g.reject(st, 0) {
		t.Fatal(`admission "off" rejected`)
	}
	st.spec.Admission, st.spec.Autoscaler = "", mu.ASRPS
	if g.reject(st, 0) {
		t.Fatal("the rps baseline rejected: by default only Mu has admission")
	}
	f := testFn(mu.ASMu)
	f.Admission = "sometimes"
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "admission") {
		t.Fatalf("admission %q accepted: %v", f.Admission, err)
	}
}
