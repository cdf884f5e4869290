package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Two attacks at once, one against a server that takes 200 ms: the mix's
// p99.9 is the slow server's (a quantile of the union), its p50 the fast
// one's (it sent most requests), and every request is counted.
func TestRunHTTPMixQuantilesOfTheUnion(t *testing.T) {
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer fast.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	defer slow.Close()
	d := time.Second
	res, err := RunHTTPMix(context.Background(), []HTTPRun{
		{URL: fast.URL, Shape: Fixed{RPS: 90}, Duration: d},
		{URL: slow.URL, Shape: Fixed{RPS: 10}, Duration: d},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 100 || res.Successes != 100 {
		t.Fatalf("sent %d, ok %d; want 100 each", res.Requests, res.Successes)
	}
	if res.P999Us < 190e3 || res.P50Us > 100e3 {
		t.Errorf("p50 %v µs, p99.9 %v µs: want the fast server's median and the slow one's tail", res.P50Us, res.P999Us)
	}
	if _, err := RunHTTPMix(context.Background(), []HTTPRun{{URL: "http://192.0.2.1/", Shape: Fixed{RPS: 1}, Duration: d}}); err == nil {
		t.Error("non-loopback target accepted")
	}
}
