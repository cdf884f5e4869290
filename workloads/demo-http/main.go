// Command demo-http is the benchmark's own HTTP service (workload 1):
// a CPU-heavy endpoint and a memory-growing endpoint, so a policy's CPU and
// memory limits both show up in client latency.
//
//	GET /cpu?ms=N            hash for about N ms of single-core work
//	GET /mem?mib=N&hold=MS   allocate and touch N MiB, hold MS ms, release
//	    &bg=1                reply once the pages are charged and hold them
//	                         in the background (memory pressure without the
//	                         hold in the client's latency)
//	GET /chain?ms=N          burn N×-scale ms, then call the /chain of every
//	                         -next service in parallel (a multi-service app:
//	                         each hop is a container; a list fans out)
//	GET /healthz             200 "ok"
//
// /cpu and /chain stop working for a request whose client has gone, and
// /chain's calls to its next hops carry the request's context, so they
// are cancelled with it (as a Go service that passes its context on).
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/escra-dev/escra/internal/cpuwork"
)

// hashesPerMs is measured once at start so that /cpu?ms=N is a fixed
// amount of work (not wall time): under throttling the request takes longer,
// which is exactly what the client should see. It is measured per ms of
// this process's CPU time (cpuwork.PerMs), so a container that starts under
// a small quota or on a busy host does the same work per request as any
// other copy of it (a wall-clock calibration measured about half the rate
// under a 0.25-core quota, and benchmarks then compared policies on apps
// doing different work). -hashes-per-ms sets it instead.
var hashesPerMs = 1

// calibrate spends about 30 ms of CPU (the old wall-clock window was 50 ms).
func calibrate() {
	if per, err := cpuwork.PerMs(3, 10*time.Millisecond); err == nil {
		hashesPerMs = per
	}
}

func burn(ctx context.Context, ms int) ([32]byte, bool) {
	return hashes(ctx, ms*hashesPerMs)
}

// burnUs is burn at microsecond resolution (a -scale below 1).
func burnUs(ctx context.Context, us int) ([32]byte, bool) {
	return hashes(ctx, us*hashesPerMs/1000)
}

// hashes runs n SHA-256 rounds and stops early, reporting false, once ctx
// is done: a request whose client has gone (its timeout, or an upstream
// hop's) is not worth finishing. Without this an overloaded service kept
// burning for requests nobody waited for, fanned them out to its next
// hops, and its backlog of orphans grew until the memory limit killed it.
func hashes(ctx context.Context, n int) ([32]byte, bool) {
	var buf [32]byte
	for i := 0; i < n; i++ {
		if i&1023 == 1023 && ctx.Err() != nil {
			return buf, false
		}
		buf = sha256.Sum256(buf[:])
	}
	return buf, true
}

func intParam(r *http.Request, name string, def, max int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > max {
		return 0, fmt.Errorf("%s must be an integer in [0,%d]", name, max)
	}
	return v, nil
}

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "address to listen on (containers use --network host)")
	next := flag.String("next", "", "base URLs, comma-separated, of the services /chain calls in parallel (empty: last hop)")
	scale := flag.Float64("scale", 1, "multiplies /chain's ms: this service's share of a request's CPU")
	hpm := flag.Int("hashes-per-ms", 0, "SHA-256 rounds per ms of work (0: calibrate at start)")
	flag.Parse()
	switch {
	case *hpm < 0 || *hpm > 1e8:
		fmt.Fprintln(os.Stderr, "demo-http: -hashes-per-ms must be in [0, 1e8]")
		os.Exit(2)
	case *hpm > 0:
		hashesPerMs = *hpm
	default:
		calibrate()
	}
	hop := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var nexts []string
	for _, n := range strings.Split(*next, ",") {
		if n = strings.TrimSpace(n); n != "" {
			nexts = append(nexts, n)
		}
	}
	if !(*scale >= 0) || *scale > 1000 {
		fmt.Fprintln(os.Stderr, "demo-http: -scale must be in [0, 1000]")
		os.Exit(2)
	}

	mux := newMux(nexts, *scale, hop)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	slog.Info("demo-http listening", "addr", *addr, "hashes_per_ms", hashesPerMs)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "demo-http:", err)
		os.Exit(1)
	}
}

// newMux serves the endpoints; /chain burns its share (scale) and calls
// every next hop in parallel through hop.
func newMux(nexts []string, scale float64, hop *http.Client) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/cpu", func(w http.ResponseWriter, r *http.Request) {
		ms, err := intParam(r, "ms", 5, 60000)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum, ok := burn(r.Context(), ms)
		if !ok {
			return // the client has gone
		}
		fmt.Fprintf(w, "%x\n", sum[:4])
	})
	hops := func(w http.ResponseWriter, r *http.Request, ms int, to []string) {
		sum, ok := burnUs(r.Context(), int(float64(ms)*scale*1000))
		if !ok {
			return // the client has gone: no hop is called for it
		}
		errs := make(chan error, len(to))
		for _, n := range to {
			go func() {
				// The request's context: when our client gives up, the
				// next hops' requests are cancelled too.
				req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, fmt.Sprintf("%s/chain?ms=%d", n, ms), nil)
				if err != nil {
					errs <- err
					return
				}
				resp, err := hop.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				errs <- err
			}()
		}
		var failed error
		for range to {
			if err := <-errs; err != nil {
				failed = err
			}
		}
		if failed != nil {
			http.Error(w, "next hop: "+failed.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, "%x\n", sum[:4])
	}
	mux.HandleFunc("/chain", func(w http.ResponseWriter, r *http.Request) {
		ms, err := intParam(r, "ms", 2, 60000)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hops(w, r, ms, nexts)
	})
	// /fan?to=i: a fan-out front end's request for one back end only (the
	// request mix decides which back end works).
	mux.HandleFunc("/fan", func(w http.ResponseWriter, r *http.Request) {
		ms, err := intParam(r, "ms", 2, 60000)
		if err == nil && len(nexts) == 0 {
			err = fmt.Errorf("/fan needs -next")
		}
		var to int
		if err == nil {
			to, err = intParam(r, "to", 0, max(0, len(nexts)-1))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hops(w, r, ms, nexts[to:to+1])
	})
	mux.HandleFunc("/mem", func(w http.ResponseWriter, r *http.Request) {
		mib, err := intParam(r, "mib", 16, 16384)
		if err == nil {
			var hold int
			hold, err = intParam(r, "hold", 100, 600000)
			if err == nil {
				// mmap/munmap rather than the Go heap: the pages are charged
				// when touched and uncharged at once when released, so the
				// cgroup's usage follows the requests (no GC or scavenger lag).
				b, merr := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
				if merr != nil {
					http.Error(w, merr.Error(), http.StatusServiceUnavailable)
					return
				}
				for i := 0; i < len(b); i += 4096 { // touch every page so it is charged
					b[i] = 1
				}
				if r.URL.Query().Get("bg") == "1" {
					go func() {
						time.Sleep(time.Duration(hold) * time.Millisecond)
						syscall.Munmap(b)
					}()
					fmt.Fprintf(w, "%d\n", len(b)>>20)
					return
				}
				time.Sleep(time.Duration(hold) * time.Millisecond)
				fmt.Fprintf(w, "%d\n", len(b)>>20)
				syscall.Munmap(b)
				return
			}
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
	})
	return mux
}
