package queueproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
)

// At concurrency 1 and a queue of 1: one request runs, one waits, the
// third is refused with 503; the answers carry the piggybacked metrics.
func TestConcurrencyQueueAndHeaders(t *testing.T) {
	release := make(chan struct{})
	var running, peak atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	p, err := New(up.URL, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	type res struct {
		code int
		h    http.Header
	}
	out := make(chan res, 3)
	var wg sync.WaitGroup
	get := func() {
		defer wg.Done()
		r, err := http.Get(front.URL + "/x")
		if err != nil {
			out <- res{code: -1}
			return
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		out <- res{r.StatusCode, r.Header}
	}
	wg.Add(2)
	go get()
	deadline := time.Now().Add(5 * time.Second)
	for running.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	go get()
	for p.Snapshot().Queue < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	wg.Add(1)
	get() // queue full
	if r := <-out; r.code != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d, want 503", r.code)
	}
	close(release)
	wg.Wait()
	close(out)
	for r := range out {
		if r.code != 200 {
			t.Fatalf("queued request: %d", r.code)
		}
		if _, err := strconv.ParseFloat(r.h.Get(mu.HeaderConfidence), 64); err != nil {
			t.Fatalf("no confidence header: %v", r.h)
		}
		if r.h.Get(mu.HeaderQueue) == "" || r.h.Get(mu.HeaderExecMs) == "" || r.h.Get(mu.HeaderDeparture) == "" {
			t.Fatalf("missing piggybacked headers: %v", r.h)
		}
	}
	if peak.Load() != 1 {
		t.Fatalf("%d requests ran at once, concurrency 1", peak.Load())
	}
	if _, err := New("::bad", 1, 1); err == nil {
		t.Fatal("bad upstream accepted")
	}
	if _, err := New(up.URL, 0, 1); err == nil {
		t.Fatal("concurrency 0 accepted")
	}
}
