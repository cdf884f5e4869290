package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// Before any replica has answered, the gateway knows nothing of the
// function's speed: like Knative's activator it sends a replica at most
// its concurrency and holds the rest, instead of queueing them all at the
// first replica while later ones stand idle (Table 5's cold start put
// requests 13 s deep in one queue).
func TestColdStartHoldsRequestsBeyondConcurrency(t *testing.T) {
	sc := &procScaler{ceiling: 4, work: 3 * time.Second}
	defer sc.closeAll()
	f := testFn(mu.ASRPS) // no admission: every request is eventually sent
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := g.fns["hello"]
	g.kick(st)
	g.wg.Wait()
	front := httptest.NewServer(g)
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 6 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/fn/hello/x", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	// Timing only decides whether there is anything to judge: a replica
	// that answered (3 s of work) before the check makes the rest moot.
	stalled := func() {
		if st.pool.Known() {
			t.Skip("the replica answered before the check (3 s of work): the machine stalled; nothing to judge")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		in := st.inflight
		st.mu.Unlock()
		if in == 6 {
			break
		}
		stalled()
		if time.Now().After(deadline) {
			t.Fatalf("%d of 6 requests reached the gateway", in)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let any wrongly sent request be counted
	sent := 0
	for _, b := range st.pool.Stats() {
		sent += b.Inflight
	}
	stalled()
	if sent != f.Concurrency {
		t.Fatalf("%d requests sent to the one replica before it answered, want its concurrency %d (the rest held at the gateway)", sent, f.Concurrency)
	}
	// A second replica takes held requests at once.
	st.mu.Lock()
	st.pending++
	st.mu.Unlock()
	g.wg.Add(1)
	g.addOne(st, "")
	deadline = time.Now().Add(10 * time.Second)
	for sent < 2*f.Concurrency && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		sent = 0
		for _, b := range st.pool.Stats() {
			sent += b.Inflight
		}
	}
	stalled()
	if sent != 2*f.Concurrency {
		t.Fatalf("with a second replica, %d requests in flight, want %d", sent, 2*f.Concurrency)
	}
}
