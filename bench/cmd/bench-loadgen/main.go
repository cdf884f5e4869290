// Command bench-loadgen drives a running escra-controller for `make
// bench-controller`: N simulated containers on M simulated hosts over
// loopback (TCP sessions, UDP telemetry every period, OOM requests at a
// set rate, daemons that ack set-limits and answer reclaims). It measures
// the controller's CPU from /proc/PID/stat and reads the controller's own
// latency histograms from its admin API, then writes summary.json and a
// report.
package main

import (
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/errtally"
	"github.com/escra-dev/escra/internal/procstat"
	"github.com/escra-dev/escra/internal/simdaemon"
)

const mib = 1 << 20

// The floors a controller for many hosts is held to on one core of a
// 2-core machine (summary.json floors_met).
const (
	floorPerCore     = 50000
	floorDecisionP99 = 300
	floorVerdictP99  = 500
)

type opts struct {
	certs       string
	tcp, admin  string
	pid         int
	containers  int
	hosts, apps int
	warmup, run time.Duration
	period      time.Duration
	oomRate     float64
	out         string
	clkTck      float64
	prefix      string
}

func main() {
	var o opts
	flag.StringVar(&o.tcp, "controller", "127.0.0.1:17470", "controller session address")
	flag.StringVar(&o.admin, "admin", "127.0.0.1:17472", "controller admin address")
	flag.IntVar(&o.pid, "pid", 0, "controller PID (CPU is read from /proc/PID/stat)")
	flag.IntVar(&o.containers, "containers", 5000, "simulated containers N")
	flag.IntVar(&o.hosts, "hosts", 10, "simulated hosts M")
	flag.IntVar(&o.apps, "apps", 50, "Distributed Containers the containers are spread over")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "warm-up before measuring")
	flag.DurationVar(&o.run, "duration", 30*time.Second, "measured interval")
	flag.DurationVar(&o.period, "period", 100*time.Millisecond, "telemetry period")
	flag.Float64Var(&o.oomRate, "oom-rate", 50, "OOM requests per second (all hosts)")
	flag.StringVar(&o.out, "out", "results/controller", "output directory")
	flag.Float64Var(&o.clkTck, "clk-tck", 100, "kernel USER_HZ for /proc/PID/stat")
	flag.StringVar(&o.prefix, "controller-prefix", "", "how the controller was started (for the report)")
	flag.StringVar(&o.certs, "certs", "", "mutual TLS with escractl certs --hosts sim00,... from this directory (empty: plain)")
	flag.Parse()
	if o.pid <= 0 || o.containers < 1 || o.hosts < 1 || o.apps < 1 || o.containers > 1<<20 || o.hosts > o.containers {
		fmt.Fprintln(os.Stderr, "loadgen: need --pid, containers >= hosts >= 1, apps >= 1")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type sim struct {
	d      *simdaemon.Daemon
	h      []uint32
	demand []float64 // fraction of a core wanted this period
}

func procCPU(pid int) (float64, error) {
	st, err := procstat.Read(pid)
	if err != nil {
		return 0, err
	}
	return float64(st.CPUTicks()), nil
}

// adminClient is the controller's admin API: HTTPS with the admin's
// certificate when the controller runs with certificates (escractl certs
// wrote admin.pem beside the hosts'), plain HTTP otherwise.
func adminClient(o opts) (*adminclient.Client, error) {
	if o.certs == "" {
		return adminclient.New(o.admin)
	}
	tc, err := adminclient.OperatorTLS(o.certs, auth.RoleAdmin)
	if err != nil {
		return nil, err
	}
	return adminclient.NewTLS(o.admin, tc)
}

func run(o opts) error {
	ctx := context.Background()
	admin, err := adminClient(o)
	if err != nil {
		return err
	}
	perApp := (o.containers + o.apps - 1) / o.apps
	fmt.Printf("bench-controller: %d containers, %d hosts, %d apps, period %v, OOM %.0f/s\n",
		o.containers, o.hosts, o.apps, o.period, o.oomRate)
	for a := range o.apps {
		spec := server.AppSpec{Name: fmt.Sprintf("app%03d", a), CPUCores: 0.5 * float64(perApp),
			MemoryBytes: int64(perApp) * 256 * mib, Sigma: 0.2}
		if err := admin.PutApp(ctx, spec); err != nil {
			return err
		}
	}
	sims := make([]*sim, o.hosts)
	for h := range o.hosts {
		var tc *tls.Config
		if o.certs != "" {
			name := fmt.Sprintf("sim%02d", h)
			var err error
			if tc, err = auth.ClientConfig(auth.Files{CA: auth.CAPath(o.certs), Cert: auth.CertPath(o.certs, name), Key: auth.KeyPath(o.certs, name)}, ""); err != nil {
				return err
			}
		}
		d, err := simdaemon.DialTLS(o.tcp, fmt.Sprintf("sim%02d", h), 64, 256<<30, tc)
		if err != nil {
			return err
		}
		defer d.Close()
		// Revoked CPU leases and memory credit come back, as escrad
		// returns them; unanswered, every revoke kept its share counted
		// for the rest of the run.
		d.AnswerRevokes.Store(true)
		sims[h] = &sim{d: d}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range o.containers {
		s := sims[i%o.hosts]
		handle := uint32(len(s.h) + 1)
		if err := s.d.Register(handle, fmt.Sprintf("app%03d", i%o.apps), -1, 0, int64(50+r.IntN(100))*mib); err != nil {
			return err
		}
		s.h = append(s.h, handle)
		s.demand = append(s.demand, 0.05+r.Float64()*0.4)
	}
	fmt.Printf("bench-controller: registered %d containers; waiting for bootstrap\n", o.containers)
	deadline := time.Now().Add(30 * time.Second)
	for {
		apps, err := admin.Apps(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, a := range apps {
			n += a.Members
		}
		if n == o.containers {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d containers registered", n, o.containers)
		}
		time.Sleep(100 * time.Millisecond)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// No churn and no reconnects here: every error kind is a finding.
	errs := errtally.New(slog.New(slog.NewTextHandler(os.Stderr, nil)), "loadgen error", nil)
	pUs := float64(o.period.Microseconds())
	for h, s := range sims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(uint64(h), 9))
			// Stagger hosts across the period, as independent machines are.
			time.Sleep(time.Duration(h) * o.period / time.Duration(len(sims)))
			t := time.NewTicker(o.period)
			defer t.Stop()
			stats := make([]simdaemon.Stat, len(s.h))
			tick := 0
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				tick++
				for i, handle := range s.h {
					// Demand: a random walk with occasional bursts.
					dm := s.demand[i] + (rr.Float64()-0.5)*0.1
					if rr.IntN(200) == 0 {
						dm += 0.6
					}
					dm = min(max(dm, 0.02), 1.5)
					s.demand[i] = dm
					c, _ := s.d.Container(handle)
					want := int64(dm * pUs)
					stats[i] = simdaemon.Stat{Handle: handle, UsageUs: want, Throttled: c.QuotaUs > 0 && want > c.QuotaUs}
				}
				if err := s.d.SendPeriod(stats); err != nil {
					errs.Add("telemetry_send", err, "host", s.d.HostID, "session", s.d.SessionID, "tick", tick, "stats", len(stats))
				}
				if tick%10 == 0 {
					for _, handle := range s.h {
						s.d.SetUsage(handle, int64(40+rr.IntN(120))*mib)
					}
					s.d.SendUsage()
				}
			}
		}()
	}
	var oomSent, oomGranted, oomFailed atomic.Uint64
	var oomMu sync.Mutex
	var oomClient []float64
	if o.oomRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rand.New(rand.NewPCG(7, 7))
			t := time.NewTicker(time.Duration(float64(time.Second) / o.oomRate))
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				s := sims[rr.IntN(len(sims))]
				handle := s.h[rr.IntN(len(s.h))]
				c, _ := s.d.Container(handle)
				wg.Add(1)
				go func() {
					defer wg.Done()
					oomSent.Add(1)
					t0 := time.Now()
					v, id, err := s.d.OOM(handle, c.MemLimit, c.MemLimit, 16, 5*time.Second)
					if err != nil {
						oomFailed.Add(1)
						errs.Add("oom_no_verdict", err, "host", s.d.HostID, "session", s.d.SessionID, "handle", handle,
							"request", id, "waited", time.Since(t0).Round(time.Microsecond))
						return
					}
					oomMu.Lock()
					oomClient = append(oomClient, float64(time.Since(t0).Microseconds()))
					oomMu.Unlock()
					if v.Granted {
						oomGranted.Add(1)
					}
				}()
			}
		}()
	}
	fmt.Printf("bench-controller: warming up for %v\n", o.warmup)
	time.Sleep(o.warmup)
	before, err := admin.ResetStats(ctx)
	if err != nil {
		return err
	}
	cpu0, err := procCPU(o.pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	sent0 := uint64(0)
	for _, s := range sims {
		sent0 += s.d.UDPStats.Load()
	}
	fmt.Printf("bench-controller: measuring for %v\n", o.run)
	for el := time.Duration(0); el < o.run; el += 5 * time.Second {
		time.Sleep(min(5*time.Second, o.run-el))
		c, _ := procCPU(o.pid)
		st, _ := admin.Stats(ctx)
		fmt.Printf("  t=%4.0fs controller %.3f cores, decisions %d (p99 %d us), stats %d\n",
			time.Since(t0).Seconds(), (c-cpu0)/o.clkTck/time.Since(t0).Seconds(), st.Decisions, st.DecisionLatencyP99Us,
			st.TelemetryStats-before.TelemetryStats)
	}
	cpu1, _ := procCPU(o.pid)
	wall := time.Since(t0).Seconds()
	after, err := admin.Stats(ctx)
	if err != nil {
		return err
	}
	sent1 := uint64(0)
	for _, s := range sims {
		sent1 += s.d.UDPStats.Load()
	}
	apps, _ := admin.Apps(ctx)
	close(stop)
	wg.Wait()

	cores := (cpu1 - cpu0) / o.clkTck / wall
	statsRecv := after.TelemetryStats - before.TelemetryStats
	bytesRecv := after.TelemetryBytes - before.TelemetryBytes
	var dropped uint64
	for k, v := range after.Dropped {
		dropped += v - before.Dropped[k]
	}
	overOmega := 0
	for _, a := range apps {
		if a.CPUAllocatedCores > a.CPUCores+1e-9 {
			overOmega++
		}
	}
	sort.Float64s(oomClient)
	q := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return xs[min(int(p*float64(len(xs))), len(xs)-1)]
	}
	load, _ := os.ReadFile("/proc/loadavg")
	sum := map[string]any{
		"controller_prefix":             o.prefix,
		"tls":                           o.certs != "",
		"load_average_1m_end":           strings.Fields(string(load) + " ?")[0],
		"containers":                    o.containers,
		"hosts":                         o.hosts,
		"apps":                          o.apps,
		"period_ms":                     o.period.Milliseconds(),
		"measured_s":                    wall,
		"controller_cpu_cores":          cores,
		"containers_per_core":           float64(o.containers) / max(cores, 1e-6),
		"decision_latency_p50_us":       after.DecisionLatencyP50Us,
		"decision_latency_p99_us":       after.DecisionLatencyP99Us,
		"decision_latency_mean_us":      after.DecisionLatencyMeanUs,
		"decisions":                     after.Decisions,
		"decisions_per_s":               float64(after.Decisions) / wall,
		"stats_received":                statsRecv,
		"stats_sent":                    sent1 - sent0,
		"stats_per_s":                   float64(statsRecv) / wall,
		"wire_bytes_per_stat":           float64(bytesRecv) / max(float64(statsRecv), 1),
		"telemetry_bytes_per_s":         float64(bytesRecv) / wall,
		"telemetry_datagrams":           after.TelemetryDatagrams - before.TelemetryDatagrams,
		"input_dropped":                 dropped,
		"oom_requests":                  oomSent.Load(),
		"oom_granted":                   oomGranted.Load(),
		"oom_failed":                    oomFailed.Load(),
		"oom_verdict_p50_us":            after.OOMVerdictP50Us,
		"oom_verdict_p99_us":            after.OOMVerdictP99Us,
		"oom_verdict_client_p99_us":     q(oomClient, 0.99),
		"apps_over_cpu_budget":          overOmega,
		"floor_containers_per_core":     floorPerCore,
		"floor_decision_latency_p99_us": floorDecisionP99,
		"floor_oom_verdict_p99_us":      floorVerdictP99,
		"floor_wire_bytes_per_stat":     40,
	}
	byKind, _, errTotal := errs.Counts()
	sum["errors_total"] = errTotal
	for _, k := range []string{"telemetry_send", "oom_no_verdict"} {
		sum["errors_"+k] = byKind[k]
	}
	pass := sum["containers_per_core"].(float64) >= floorPerCore && after.DecisionLatencyP99Us <= floorDecisionP99 &&
		after.OOMVerdictP99Us <= floorVerdictP99 && sum["wire_bytes_per_stat"].(float64) <= 40 && overOmega == 0
	sum["floors_met"] = pass
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	rep := fmt.Sprintf(`# bench-controller

%d simulated containers on %d simulated hosts in %d Distributed Containers, loopback,
telemetry every %v, OOM requests at %.0f/s, measured for %.0f s after a %v warm-up.
The controller ran as its own process (PID %d, started with prefix %q); its CPU comes from
/proc/%d/stat. Machine load average at the end: %s (other jobs share this machine).

| metric | value | floor |
|---|---|---|
| controller CPU | %.3f cores | |
| containers per core | %.0f | ≥ 50000 |
| decision latency p50 (datagram received → set-limits written) | %d µs | |
| decision latency p99 | %d µs | ≤ 300 |
| decisions per second | %.0f | |
| CPU statistics per second | %.0f | |
| telemetry wire bytes per statistic (UDP payload) | %.1f | ≤ 40 |
| OOM verdict p50 / p99 (request read → verdict written, its set-limits ahead of it) | %d / %d µs | p99 ≤ 500 |
| OOM requests sent / granted / failed | %d / %d / %d | |
| generator errors by kind | %s | |
| input dropped | %d | |
| apps with Σ quotas > Ω at the end | %d | 0 |

Floors met: %v. Escra §VI-I reports 1,192 containers per core (5.7%% of a core for 68).
`, o.containers, o.hosts, o.apps, o.period, o.oomRate, wall, o.warmup, o.pid, o.prefix, o.pid, sum["load_average_1m_end"],
		cores, sum["containers_per_core"], after.DecisionLatencyP50Us, after.DecisionLatencyP99Us,
		sum["decisions_per_s"], sum["stats_per_s"], sum["wire_bytes_per_stat"],
		after.OOMVerdictP50Us, after.OOMVerdictP99Us, oomSent.Load(), oomGranted.Load(), oomFailed.Load(),
		errtally.Line(byKind), dropped, overOmega, pass)
	if err := os.WriteFile(filepath.Join(o.out, "report.md"), []byte(rep), 0o644); err != nil {
		return err
	}
	fmt.Print(rep)
	if len(byKind) > 0 {
		fmt.Printf("note: generator errors by kind: %s (one \"loadgen error\" line each above)\n", errtally.Line(byKind))
	}
	return nil
}
