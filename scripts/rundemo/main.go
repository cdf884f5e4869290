// Command rundemo is the Go half of `make run` (scripts/run.sh does the
// processes): it builds the demo image, drives an open-loop HTTP load with
// bursts at the deployed demo app while sampling the controller, and writes
// the summary (results/run/summary.json).
//
//	rundemo image                      build escra-bench/demo-http into the main engine, print its tag
//	rundemo drive -admin URL -app APP -urls U1,U2,... -seconds N -out DIR -engines S1,S2,...
//	rundemo compare -escra DIR -static DIR   add the static split's figures to DIR/summary.json, print both
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/workloadimages"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: rundemo image | drive FLAGS"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "image":
		err = buildImage(ctx)
	case "drive":
		err = drive(ctx, os.Args[2:])
	case "compare":
		err = compare(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (image, drive, compare)", os.Args[1])
	}
	if err != nil {
		if ctx.Err() != nil { // interrupted: the caller cleans up
			fmt.Fprintln(os.Stderr, "rundemo: interrupted")
			os.Exit(130)
		}
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rundemo:", err)
	os.Exit(1)
}

func buildImage(ctx context.Context) error {
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		return err
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer cli.Close()
	b := &workloadimages.Builder{Docker: cli, RepoRoot: root, Log: func(s string) { fmt.Fprintln(os.Stderr, "rundemo:", s) }}
	tag, err := b.Build(ctx, workloadimages.DemoHTTP)
	if err != nil {
		return err
	}
	fmt.Println(tag)
	return nil
}

// Summary is results/run/summary.json (flat keys, units in names).
type Summary struct {
	CPUSlackP50Cores float64 `json:"cpu_slack_p50_cores"`
	CPUSlackP99Cores float64 `json:"cpu_slack_p99_cores"`
	ThrottledPeriods uint64  `json:"throttled_periods"`
	OOMGrants        uint64  `json:"oom_grants"`
	OOMKills         int     `json:"oom_kills"`
	// CgroupThrottledPeriods is the kernel's own count (cpu.stat
	// nr_throttled) over the load, summed over the app's containers: the
	// one throttling figure that means the same under Escra and under a
	// static split.
	CgroupThrottledPeriods uint64  `json:"cgroup_throttled_periods"`
	Containers             int     `json:"containers"`
	Hosts                  int     `json:"hosts"`
	LoadSeconds            float64 `json:"load_seconds"`
	Requests               int64   `json:"requests"`
	Successes              int64   `json:"successes"`
	LatencyP50Ms           float64 `json:"latency_p50_ms"`
	LatencyP99Ms           float64 `json:"latency_p99_ms"`
	CPULimitCores          float64 `json:"cpu_limit_cores"`
	MemoryLimitBytes       int64   `json:"memory_limit_bytes"`
	Samples                int     `json:"samples"`
}

func drive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("drive", flag.ContinueOnError)
	admin := fs.String("admin", "http://127.0.0.1:7482", "controller admin URL")
	certs := fs.String("certs", "", "directory with ca.pem and admin.pem for an HTTPS admin API (empty: plain)")
	app := fs.String("app", "demo", "app name")
	urls := fs.String("urls", "", "comma-separated base URLs of the replicas (loopback)")
	seconds := fs.Int("seconds", 60, "seconds of load")
	out := fs.String("out", "results/run", "output directory")
	engines := fs.String("engines", "", "comma-separated Docker hosts of the engines (for OOM kills)")
	base := fs.Float64("base", 30, "base requests per second")
	burst := fs.Float64("burst", 90, "extra requests per second during a burst")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var bases []string
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			bases = append(bases, strings.TrimSuffix(u, "/"))
		}
	}
	if len(bases) == 0 {
		return fmt.Errorf("drive: give the replicas with -urls")
	}
	var tc *tls.Config
	if *certs != "" {
		var err error
		if tc, err = adminclient.OperatorTLS(*certs, "admin"); err != nil {
			return err
		}
	}
	ac, err := adminclient.NewTLS(*admin, tc)
	if err != nil {
		return err
	}
	// Mostly CPU work; one request in eleven grows memory for a while, so
	// the replicas' memory limits are exercised too. The memory requests
	// reply once their pages are charged (bg=1) and hold them after: an
	// allocation that waits for a limit shows in the latency, the deliberate
	// hold does not (else 9 % of requests would last 300 ms by design and
	// the p99 would measure the hold).
	var targets []string
	for i := 0; i < 10; i++ {
		for _, b := range bases {
			targets = append(targets, b+"/cpu?ms=5")
		}
	}
	for _, b := range bases {
		targets = append(targets, b+"/mem?mib=16&hold=300&bg=1")
	}
	dur := time.Duration(*seconds) * time.Second
	// A burst every 20 s: calm for the first half of each cycle.
	shape := load.Burst{Base: *base, BurstRPS: *burst, Every: 20 * time.Second, BurstLen: 10 * time.Second, Seed: 1}
	if dur < 20*time.Second {
		shape.Every, shape.BurstLen = dur, dur/2
	}

	engineList := strings.Split(*engines, ",")
	before, err := throttledByContainer(ctx, *app, engineList)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var slack []float64
	var last []adminclient.Container
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // sample the controller five times a second
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
			cs, err := ac.Containers(sctx, *app)
			if err != nil || len(cs) == 0 {
				continue
			}
			var s float64
			for _, c := range cs {
				s += max(c.CPULimitCores()-c.CPUUsageCores(), 0)
			}
			mu.Lock()
			slack = append(slack, s)
			last = cs
			mu.Unlock()
		}
	}()
	fmt.Printf("rundemo: %s of open-loop load on %d replicas (%.0f req/s, bursts of +%.0f req/s)\n", dur, len(bases), *base, *burst)
	res, lerr := load.RunHTTP(ctx, load.HTTPRun{URLs: targets, Shape: shape, Duration: dur, Timeout: 5 * time.Second,
		Progress: func(s string) { fmt.Println("rundemo:", s) }})
	cancel()
	wg.Wait()
	if lerr != nil {
		return fmt.Errorf("load: %w", lerr)
	}
	sum := Summary{LoadSeconds: round3(res.DurationS), Requests: res.Requests, Successes: res.Successes,
		LatencyP50Ms: round3(res.P50Us / 1000), LatencyP99Ms: round3(res.P99Us / 1000)}
	if cs, err := ac.Containers(ctx, *app); err == nil && len(cs) > 0 {
		last = cs
	}
	hosts := map[string]bool{}
	for _, c := range last {
		sum.ThrottledPeriods += c.ThrottledPeriods
		sum.OOMGrants += c.OOMGrants
		hosts[c.HostID] = true
	}
	sum.Containers, sum.Hosts = len(last), len(hosts)
	if apps, err := ac.Apps(ctx); err == nil {
		for _, a := range apps {
			if a.Name == *app {
				sum.CPULimitCores, sum.MemoryLimitBytes = a.CPUCores, a.MemoryBytes
			}
		}
	}
	sort.Float64s(slack)
	sum.Samples = len(slack)
	sum.CPUSlackP50Cores = round3(quantile(slack, 0.5))
	sum.CPUSlackP99Cores = round3(quantile(slack, 0.99))
	kills, err := oomKills(ctx, *app, engineList)
	if err != nil {
		return err
	}
	sum.OOMKills = kills
	after, err := throttledByContainer(ctx, *app, engineList)
	if err != nil {
		return err
	}
	for id, n := range after {
		if n >= before[id] {
			sum.CgroupThrottledPeriods += n - before[id]
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("rundemo: %d requests, %d ok, p50 %.1f ms, p99 %.1f ms\n", res.Requests, res.Successes, sum.LatencyP50Ms, sum.LatencyP99Ms)
	return nil
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
