package main

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHashesStopWhenTheClientHasGone(t *testing.T) {
	want := [32]byte{}
	for range 3000 {
		want = sha256.Sum256(want[:])
	}
	got, ok := hashes(context.Background(), 3000)
	if !ok || got != want {
		t.Fatalf("3000 rounds with a live context: ok %v, sum %x, want %x", ok, got[:4], want[:4])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A billion rounds would take minutes; a gone client stops them at
	// the first check.
	if _, ok := hashes(ctx, 1e9); ok {
		t.Fatal("a cancelled request ran to the end")
	}
}

// A client that gives up cancels the whole chain: the next hop's request
// ends with it, not at the hop client's 10 s timeout. The client gives up
// only once the next hop has the request, so a slow machine cannot make
// the front see a request that is already cancelled.
func TestChainCancelsTheNextHopWithTheRequest(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(ended)
	}))
	defer next.Close()
	hop := &http.Client{Timeout: 10 * time.Second}
	front := httptest.NewServer(newMux([]string{next.URL}, 0, hop))
	defer front.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-started:
			cancel()
		case <-time.After(30 * time.Second):
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/chain?ms=1", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the chain answered %s although its next hop never does", resp.Status)
	}
	select {
	case <-started:
	default:
		t.Fatal("the next hop never received the request")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the next hop's request outlived its client by 5 s")
	}
}

func TestChainAnswersThroughItsHops(t *testing.T) {
	last := httptest.NewServer(newMux(nil, 0, http.DefaultClient))
	defer last.Close()
	front := httptest.NewServer(newMux([]string{last.URL, last.URL}, 0.01, http.DefaultClient))
	defer front.Close()
	resp, err := http.Get(front.URL + "/chain?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(strings.TrimSpace(string(body))) != 8 {
		t.Fatalf("chain: %s %q", resp.Status, body)
	}
	// A hop that fails makes the chain fail.
	bad := httptest.NewServer(http.NotFoundHandler())
	defer bad.Close()
	front2 := httptest.NewServer(newMux([]string{last.URL, bad.URL}, 0, http.DefaultClient))
	defer front2.Close()
	resp, err = http.Get(front2.URL + "/chain?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a failing hop gave %s, want 502", resp.Status)
	}
}

// /fan?to=i reaches back end i only; an index beyond the back ends is a
// bad request.
func TestFanCallsOneBackEnd(t *testing.T) {
	var hits [2]int
	var mu sync.Mutex
	var backs []string
	for i := range 2 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			hits[i]++
			mu.Unlock()
		}))
		defer s.Close()
		backs = append(backs, s.URL)
	}
	front := httptest.NewServer(newMux(backs, 0, http.DefaultClient))
	defer front.Close()
	for _, q := range []string{"to=1", "to=1", "to=0"} {
		resp, err := http.Get(front.URL + "/fan?ms=1&" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/fan?%s: %s", q, resp.Status)
		}
	}
	if hits != [2]int{1, 2} {
		t.Errorf("back ends got %v requests, want [1 2]", hits)
	}
	resp, err := http.Get(front.URL + "/fan?ms=1&to=2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/fan?to=2 with two back ends: %s, want 400", resp.Status)
	}
}

// rssKiB is this process's resident set from /proc/self/status.
func rssKiB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// With bg=1 the reply comes before the hold, and the pages stay resident
// until the hold ends: the memory pressure is the same, the client's
// latency no longer contains the hold.
func TestMemInBackgroundRepliesBeforeTheHold(t *testing.T) {
	srv := httptest.NewServer(newMux(nil, 0, http.DefaultClient))
	defer srv.Close()
	base := rssKiB(t)
	start := time.Now()
	resp, err := http.Get(srv.URL + "/mem?mib=64&hold=1500&bg=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "64" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if took >= 1500*time.Millisecond {
		t.Fatalf("bg=1 replied after %v, not before the 1.5 s hold", took)
	}
	if grew := rssKiB(t) - base; grew < 60<<10 {
		t.Fatalf("after the reply the process holds %d KiB more, want the 64 MiB still resident", grew)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rssKiB(t)-base > 16<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("64 MiB still resident 10 s after a 1.5 s hold")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
