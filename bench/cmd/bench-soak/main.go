// Command bench-soak drives a running escra-controller for `make soak`: N
// simulated containers on M simulated hosts over mutual TLS (telemetry
// every period, OOM requests, container churn, and now and then a host
// whose session drops and comes back), for a long time. It reads the
// controller's heap, goroutines and open descriptors from its /metrics at
// the start and the end, and writes summary.json (flat keys) and a report.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/errtally"
	"github.com/escra-dev/escra/internal/simdaemon"
)

type opts struct {
	tcp, admin, certs, out string
	containers, hosts      int
	apps                   int
	dur, warmup, period    time.Duration
	oomRate, churnRate     float64
	reconnectEvery         time.Duration
}

func main() {
	var o opts
	flag.StringVar(&o.tcp, "controller", "127.0.0.1:7470", "controller session address")
	flag.StringVar(&o.admin, "admin", "127.0.0.1:7472", "controller admin address")
	flag.StringVar(&o.certs, "certs", "", "directory of escractl certs --hosts soak1,...; empty: plain sessions")
	flag.StringVar(&o.out, "out", "results/soak", "output directory")
	flag.IntVar(&o.containers, "containers", 1000, "simulated containers")
	flag.IntVar(&o.hosts, "hosts", 8, "simulated hosts (soak1..soakM)")
	flag.IntVar(&o.apps, "apps", 20, "Distributed Containers")
	flag.DurationVar(&o.dur, "duration", 30*time.Minute, "soak length after warm-up")
	flag.DurationVar(&o.warmup, "warmup", 30*time.Second, "before the start sample")
	flag.DurationVar(&o.period, "period", 100*time.Millisecond, "telemetry period")
	flag.Float64Var(&o.oomRate, "oom-rate", 5, "OOM requests per second (all hosts)")
	flag.Float64Var(&o.churnRate, "churn-rate", 5, "containers replaced per second (all hosts)")
	flag.DurationVar(&o.reconnectEvery, "reconnect-every", time.Minute, "one host drops its session and reconnects this often")
	flag.Parse()
	if err := adminClient(o.certs, o.admin); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// host is one simulated daemon and its containers.
type host struct {
	id   string
	mu   sync.Mutex
	d    *simdaemon.Daemon
	cont map[uint32]string // handle -> app
	next uint32
	busy map[uint32]bool
	gone map[uint32]time.Time // churned handle -> when its unregister was sent
}

func (h *host) dial(o opts) error {
	var cfg *tls.Config
	if o.certs != "" {
		var err error
		cfg, err = auth.ClientConfig(auth.Files{CA: auth.CAPath(o.certs), Cert: auth.CertPath(o.certs, h.id), Key: auth.KeyPath(o.certs, h.id)}, "")
		if err != nil {
			return err
		}
	}
	d, err := simdaemon.DialTLS(o.tcp, h.id, 16, 64<<30, cfg)
	if err != nil {
		return err
	}
	h.d = d
	for hd, app := range h.cont {
		if err := d.Register(hd, app, -1, 256<<20, 64<<20); err != nil {
			return err
		}
	}
	return nil
}

func (h *host) add(app string) error {
	h.next++
	h.cont[h.next] = app
	h.busy[h.next] = rand.N(4) == 0
	return h.d.Register(h.next, app, -1, 256<<20, 64<<20)
}

type sample struct {
	HeapBytes, Goroutines, FDs, RSSBytes float64
}

func scrape(admin string) (sample, error) {
	r, err := ctl.HTTPClient().Get(ctl.URL() + "/metrics")
	if err != nil {
		return sample{}, err
	}
	defer r.Body.Close()
	var s sample
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			s.HeapBytes = v
		case "go_goroutines":
			s.Goroutines = v
		case "process_open_fds":
			s.FDs = v
		case "process_resident_memory_bytes":
			s.RSSBytes = v
		}
	}
	if s.Goroutines == 0 {
		return s, fmt.Errorf("%s/metrics has no go_goroutines", admin)
	}
	return s, sc.Err()
}

func run(o opts) error {
	if o.hosts < 1 || o.containers < o.hosts || o.apps < 1 {
		return fmt.Errorf("want containers >= hosts >= 1 and apps >= 1")
	}
	hosts := make([]*host, o.hosts)
	for i := range hosts {
		hosts[i] = &host{id: fmt.Sprintf("soak%d", i+1), cont: map[uint32]string{}, busy: map[uint32]bool{}, gone: map[uint32]time.Time{}}
		if err := hosts[i].dial(o); err != nil {
			return fmt.Errorf("%s: %w", hosts[i].id, err)
		}
	}
	for i := range o.containers {
		h := hosts[i%o.hosts]
		if err := h.add(fmt.Sprintf("soak-app-%d", i%o.apps)); err != nil {
			return err
		}
	}
	fmt.Printf("soak: %d containers on %d hosts, %d apps; warm-up %v, then %v\n", o.containers, o.hosts, o.apps, o.warmup, o.dur)
	var ooms, grants, churned, reconnects atomic.Uint64
	errs := errtally.New(slog.New(slog.NewTextHandler(os.Stderr, nil)), "soak error", expectedKinds)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() { // telemetry, every period
			defer wg.Done()
			t := time.NewTicker(o.period)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				h.mu.Lock()
				stats := make([]simdaemon.Stat, 0, len(h.cont))
				for hd := range h.cont {
					if h.busy[hd] {
						stats = append(stats, simdaemon.Stat{Handle: hd, UsageUs: 80000 + rand.Int64N(40000), Throttled: rand.N(2) == 0})
					} else {
						stats = append(stats, simdaemon.Stat{Handle: hd, UsageUs: rand.Int64N(5000)})
					}
				}
				d := h.d
				h.mu.Unlock()
				if err := d.SendPeriod(stats); err != nil {
					h.mu.Lock()
					reconnected := h.d != d
					h.mu.Unlock()
					kind := kindTelemetrySend
					if reconnected {
						kind = kindTelemetryReconnect
					}
					errs.Add(kind, err, "host", h.id, "session", d.SessionID, "stats", len(stats))
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // OOM requests, churn, reconnects
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		lastReconnect := time.Now()
		var oomDebt, churnDebt float64
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			oomDebt += o.oomRate / 10
			churnDebt += o.churnRate / 10
			for ; oomDebt >= 1; oomDebt-- {
				h := hosts[rand.N(len(hosts))]
				h.mu.Lock()
				var hd uint32
				for k := range h.cont {
					hd = k
					break
				}
				d := h.d
				h.mu.Unlock()
				go func() {
					t0 := time.Now()
					v, id, err := d.OOM(hd, 256<<20, 256<<20, 256, 2*time.Second)
					at := time.Now()
					ooms.Add(1)
					if err == nil && v.GetGranted() {
						grants.Add(1)
						return
					}
					h.mu.Lock()
					reconnected := h.d != d
					goneAt, churnedAway := h.gone[hd]
					h.mu.Unlock()
					ctx := []any{"host", h.id, "session", d.SessionID, "handle", hd, "request", id, "waited", at.Sub(t0).Round(time.Microsecond)}
					switch {
					case err != nil && reconnected:
						errs.Add(kindOOMReconnect, err, ctx...)
					case err != nil:
						errs.Add(kindOOMFailed, err, ctx...)
					case v.GetReason() == "unknown container" && churnedAway && goneAt.Before(at):
						errs.Add(kindOOMChurn, fmt.Errorf("denied: %s", v.GetReason()), append(ctx, "unregistered_before_verdict", at.Sub(goneAt).Round(time.Microsecond))...)
					default:
						errs.Add(kindOOMDenied, fmt.Errorf("denied: %s", v.GetReason()), ctx...)
					}
				}()
			}
			for ; churnDebt >= 1; churnDebt-- {
				h := hosts[rand.N(len(hosts))]
				h.mu.Lock()
				for k, app := range h.cont {
					delete(h.cont, k)
					delete(h.busy, k)
					h.gone[k] = time.Now()
					if err := h.d.Unregister(k); err != nil {
						errs.Add(kindChurn, err, "host", h.id, "session", h.d.SessionID, "op", "unregister", "handle", k)
					}
					if err := h.add(app); err != nil {
						errs.Add(kindChurn, err, "host", h.id, "session", h.d.SessionID, "op", "register", "handle", h.next)
					}
					break
				}
				h.mu.Unlock()
				churned.Add(1)
			}
			if o.reconnectEvery > 0 && time.Since(lastReconnect) >= o.reconnectEvery {
				lastReconnect = time.Now()
				h := hosts[rand.N(len(hosts))]
				h.mu.Lock()
				h.d.Close()
				if err := h.dial(o); err != nil {
					errs.Add(kindReconnect, err, "host", h.id)
				}
				h.mu.Unlock()
				reconnects.Add(1)
			}
		}
	}()

	time.Sleep(o.warmup)
	start, err := scrape(o.admin)
	if err != nil {
		return err
	}
	drops0, err := controllerDrops()
	if err != nil {
		return err
	}
	fmt.Printf("soak: start heap %.1f MiB, %v goroutines, %v fds\n", start.HeapBytes/(1<<20), start.Goroutines, start.FDs)
	t0 := time.Now()
	end := start
	for time.Since(t0) < o.dur {
		time.Sleep(min(time.Minute, o.dur-time.Since(t0)))
		s, err := scrape(o.admin)
		if err != nil {
			return err
		}
		end = s // the last one is the end sample: under load, as the start one
		byKind, _, _ := errs.Counts()
		fmt.Printf("soak: %v heap %.1f MiB, %v goroutines, %v fds, %d OOM requests, %d churned, %d reconnects, errors: %s\n",
			time.Since(t0).Round(time.Second), s.HeapBytes/(1<<20), s.Goroutines, s.FDs, ooms.Load(), churned.Load(), reconnects.Load(), errtally.Line(byKind))
	}
	close(stop)
	wg.Wait()
	time.Sleep(3 * time.Second) // let the last OOM requests (2 s timeout) and acks settle
	// Idle, 3 s after the load stopped: in-use heap here is whatever the
	// last burst left before the next GC, not a trend (reported apart).
	idle, err := scrape(o.admin)
	if err != nil {
		return err
	}
	drops1, err := controllerDrops()
	if err != nil {
		return err
	}
	byKind, expected, unexpected := errs.Counts() // before the closes below end sessions on purpose
	for _, h := range hosts {
		h.d.Close()
	}
	sum := map[string]any{
		"containers": o.containers, "hosts": o.hosts, "apps": o.apps, "duration_s": o.dur.Seconds(),
		"tls": o.certs != "", "oom_requests": ooms.Load(), "oom_grants": grants.Load(),
		"containers_churned": churned.Load(), "session_reconnects": reconnects.Load(),
		"errors_total": expected + unexpected, "errors_expected": expected, "errors_unexpected": unexpected,
		"heap_start_bytes": start.HeapBytes, "heap_end_bytes": end.HeapBytes,
		"goroutines_start": start.Goroutines, "goroutines_end": end.Goroutines,
		"fds_start": start.FDs, "fds_end": end.FDs,
		"rss_start_bytes": start.RSSBytes, "rss_end_bytes": end.RSSBytes,
		"heap_idle_after_stop_bytes": idle.HeapBytes, "goroutines_idle_after_stop": idle.Goroutines,
		"fds_idle_after_stop": idle.FDs,
	}
	for k := range expectedKinds {
		byKind[k] += 0 // expected kinds always appear, as 0 when they did not happen
	}
	for k, v := range byKind {
		sum["errors_"+k] = v
	}
	dropped := map[string]uint64{}
	for k, v := range drops1 {
		if d := v - drops0[k]; d > 0 {
			dropped[k] = d
		}
		sum["controller_dropped_"+k] = v - drops0[k]
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	rep := fmt.Sprintf("# Soak\n\n%d containers on %d hosts (%d apps), %v after a %v warm-up, TLS %v.\n"+
		"%d OOM requests (%d granted), %d containers churned, %d session reconnects.\n\n"+
		"| | start | end |\n|---|---|---|\n| heap in use | %.1f MiB | %.1f MiB |\n| goroutines | %.0f | %.0f |\n"+
		"| open fds | %.0f | %.0f |\n| RSS | %.1f MiB | %.1f MiB |\n\n"+
		"Both samples under load; 3 s after the load stopped: heap %.1f MiB, %.0f goroutines, %.0f fds.\n"+
		"Generator errors: %d unexpected, %d expected races (by kind: %s).\n"+
		"Controller input dropped during the run, by reason: %s.\n",
		o.containers, o.hosts, o.apps, o.dur, o.warmup, o.certs != "", ooms.Load(), grants.Load(), churned.Load(),
		reconnects.Load(), start.HeapBytes/(1<<20), end.HeapBytes/(1<<20), start.Goroutines, end.Goroutines,
		start.FDs, end.FDs, start.RSSBytes/(1<<20), end.RSSBytes/(1<<20),
		idle.HeapBytes/(1<<20), idle.Goroutines, idle.FDs, unexpected, expected, errtally.Line(byKind), errtally.Line(dropped))
	ks := make([]string, 0, len(expectedKinds))
	for k := range expectedKinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	rep += "\nExpected kinds (docs/security.md):\n"
	for _, k := range ks {
		rep += fmt.Sprintf("- %s: %s\n", k, expectedKinds[k])
	}
	if err := os.WriteFile(filepath.Join(o.out, "report.md"), []byte(rep), 0o644); err != nil {
		return err
	}
	fmt.Print(rep)
	fmt.Printf("soak: wrote %s/summary.json and report.md\n", o.out)
	if unexpected > 0 {
		return fmt.Errorf("%d unexpected errors (see the \"soak error\" lines with expected=false)", unexpected)
	}
	return nil
}

// Error kinds. The expected ones are races the generator itself creates
// (a reconnect or a churn overtaking a request already on its way); they
// happen to real daemons too and end safely. Any other kind is a finding.
const (
	kindTelemetryReconnect = "telemetry_send_during_reconnect" // expected
	kindOOMReconnect       = "oom_session_closed_by_reconnect" // expected
	kindOOMChurn           = "oom_unknown_container_churned"   // expected
	kindTelemetrySend      = "telemetry_send"
	kindOOMFailed          = "oom_no_verdict"
	kindOOMDenied          = "oom_denied"
	kindChurn              = "churn"
	kindReconnect          = "reconnect"
)

var expectedKinds = map[string]string{
	kindTelemetryReconnect: "a period's datagrams were being sent on the UDP socket the host's reconnect just closed",
	kindOOMReconnect:       "an OOM request was waiting on the session the host's reconnect just closed (a real escrad releases the group: kernel OOM killer)",
	kindOOMChurn:           "the container was unregistered (churn) after the request picked it and before the controller read the request: denied as unknown container",
}

// controllerDrops reads the controller's dropped-input counters by reason
// (its /v1/stats); the soak reports how many grew during the run.
func controllerDrops() (map[string]uint64, error) {
	st, err := ctl.Stats(context.Background())
	if err != nil {
		return nil, err
	}
	return st.Dropped, nil
}

// ctl is the controller's admin API: HTTPS with the admin's certificate
// when the controller runs with certificates (escractl certs wrote
// admin.pem beside the hosts'), plain HTTP otherwise.
var ctl *adminclient.Client

func adminClient(certs, addr string) error {
	var err error
	if certs == "" {
		ctl, err = adminclient.New(addr)
		return err
	}
	tc, err := adminclient.OperatorTLS(certs, auth.RoleAdmin)
	if err != nil {
		return err
	}
	ctl, err = adminclient.NewTLS(addr, tc)
	return err
}
