// Package matrix runs the benchmark matrix: for every workload,
// load and policy it starts fresh containers, lets the policy manage them,
// drives the load with a real client, samples slack every 100 ms and
// records one report.Run. Static limits come from a profiling run of the
// same workload and load without limits (Escra §VI-B).
package matrix

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/workloadimages"
)

// Workload is one application under test.
type Workload struct {
	Name     string
	Image    workloadimages.Spec
	Replicas int
	// Cmd is the command of replica i listening on port, given the number
	// of CPUs the containers under test are pinned to.
	Cmd func(i, port, cpus int) []string
	// Loads this workload is driven with (names given to Client).
	Loads []string
	// Ready waits until every replica answers.
	Ready func(ctx context.Context, ports []int) error
	// Client drives the load and reports what the client measured.
	Client func(ctx context.Context, r ClientRun) (load.Result, error)
	// NoClient: Client only waits (no requests, so no latency): a batch
	// container beside it would measure nothing the plain run does not.
	NoClient bool
	// Offset: the containers peak apart (offset.go); reported apart.
	Offset bool
	// Streams, when set, are the request streams Client drives at once
	// (offset.go), and DemandModel's input.
	Streams func(r ClientRun) []Stream
	// Modelled, for a workload whose Client is not stream-driven, are
	// streams that approximate its requests for DemandModel only.
	Modelled func(r ClientRun) []Stream
}

var demoImage = workloadimages.DemoHTTP

func init() {
	for _, w := range OffsetWorkloads {
		w.Client = func(ctx context.Context, r ClientRun) (load.Result, error) { return streamsClient(ctx, w, r) }
		Workloads = append(Workloads, w)
	}
}

// ClientRun is one drive of a workload's client.
type ClientRun struct {
	Load       string // the shape or tool name (fixed, exp, burst, trace, wrk, ...)
	Ports      []int
	Duration   time.Duration
	Seed       int64
	BurstCycle time.Duration // 0: the Escra paper's 20 s
	Progress   func(string)
}

func waitTCP(ctx context.Context, ports []int) error {
	for _, p := range ports {
		for {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("port %d never listened: %w", p, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func waitHTTP(path string) func(context.Context, []int) error {
	return func(ctx context.Context, ports []int) error {
		for _, p := range ports {
			url := fmt.Sprintf("http://127.0.0.1:%d%s", p, path)
			for {
				resp, err := http.Get(url)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						break
					}
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s never answered: %w", url, ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		return nil
	}
}

// httpClient drives vegeta with one of the seed shapes at scale over urls.
func httpClient(scale float64, urls func(ports []int) []string, header http.Header) func(context.Context, ClientRun) (load.Result, error) {
	return func(ctx context.Context, r ClientRun) (load.Result, error) {
		shape, err := load.ShapeByName(r.Load, scale, r.Seed)
		if err != nil {
			return load.Result{}, err
		}
		if b, ok := shape.(load.Burst); ok && r.BurstCycle > 0 {
			b.Every, b.BurstLen = r.BurstCycle, r.BurstCycle/2
			shape = b
		}
		return load.RunHTTP(ctx, load.HTTPRun{URLs: urls(r.Ports), Shape: shape, Duration: r.Duration, Timeout: 5 * time.Second,
			Header: header, Progress: r.Progress})
	}
}

// modelled is one stream of httpClient's shape with the given CPU per
// request in each replica.
func modelled(scale float64, costMs []float64) func(ClientRun) []Stream {
	return func(r ClientRun) []Stream {
		shape, err := load.ShapeByName(r.Load, scale, r.Seed)
		if err != nil {
			return nil
		}
		if b, ok := shape.(load.Burst); ok && r.BurstCycle > 0 {
			b.Every, b.BurstLen = r.BurstCycle, r.BurstCycle/2
			shape = b
		}
		return []Stream{{Shape: shape, CostMs: costMs}}
	}
}

// Workloads are the applications of the benchmark.
var Workloads = []Workload{
	{
		// Two replicas of the demo service: 7 of 8 requests burn 3 ms of
		// CPU, 1 of 8 holds 4 MiB for 200 ms, so CPU and memory both
		// follow the load. (Faulting memory in is expensive in this VM:
		// ≈ 4 µs a page, so a 4 MiB request also costs ≈ 18 ms of CPU.)
		Name: "demo-http", Image: workloadimages.DemoHTTP, Replicas: 2,
		Cmd:   func(_, port, _ int) []string { return []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)} },
		Loads: []string{"fixed", "exp", "burst", "trace"},
		Ready: waitHTTP("/healthz"),
		// Round robin: each replica gets half the requests, 7 of 8 at
		// 3.3 ms and 1 of 8 at ≈ 18 ms.
		Modelled: modelled(0.15, []float64{2.6, 2.6}),
		Client: httpClient(0.15, func(ports []int) []string {
			var u []string
			for k := 0; k < 7; k++ {
				for _, p := range ports {
					u = append(u, fmt.Sprintf("http://127.0.0.1:%d/cpu?ms=3", p))
				}
			}
			for _, p := range ports {
				u = append(u, fmt.Sprintf("http://127.0.0.1:%d/mem?mib=4&hold=200", p))
			}
			return u
		}, nil),
	},
	{
		// A multi-service app (the Escra paper's Distributed Container spans
		// containers): front → middle → back, each a demo-http container
		// that burns 2 ms and calls the next over loopback. One app budget
		// covers all three; the load reaches only the front.
		Name: "chain", Image: workloadimages.DemoHTTP, Replicas: 3,
		Cmd: func(i, port, _ int) []string {
			args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)}
			if i < 2 {
				args = append(args, "-next", fmt.Sprintf("http://127.0.0.1:%d", port+1))
			}
			return args
		},
		Loads:    []string{"fixed", "exp", "burst", "trace"},
		Ready:    waitHTTP("/healthz"),
		Modelled: modelled(0.15, []float64{2.5, 2.5, 2.3}),
		Client: httpClient(0.15, func(ports []int) []string {
			return []string{fmt.Sprintf("http://127.0.0.1:%d/chain?ms=2", ports[0])}
		}, nil),
	},
	{
		// nginx gzip-9 of a 64 KiB text (≈ 5 ms of CPU per request here).
		// One worker per CPU the container is pinned to, as an operator
		// sets worker_processes: with two workers on one CPU, which worker
		// accepts each of wrk's 4 connections is a coin flip, and a 1:3
		// split halves one worker's share per connection (p99 ≈ 33 ms
		// against 20 ms for 4:0 or 2:2 under the same static limit;
		// docs/benchmark-runs-2026-11-27.md, run M).
		Name: "nginx", Image: workloadimages.Nginx, Replicas: 1,
		Cmd: func(_, port, cpus int) []string {
			return []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port), "-workers", fmt.Sprint(max(1, cpus))}
		},
		Loads: []string{"fixed", "exp", "burst", "trace", "wrk"},
		Ready: waitHTTP("/healthz"),
		Client: func(ctx context.Context, r ClientRun) (load.Result, error) {
			url := fmt.Sprintf("http://127.0.0.1:%d/64k.txt", r.Ports[0])
			if r.Load == "wrk" {
				return load.RunWrk(ctx, load.WrkRun{URL: url, Threads: 1, Conns: 4, Duration: r.Duration, Header: []string{"Accept-Encoding: gzip"}, Timeout: 5 * time.Second})
			}
			return httpClient(0.1, func([]int) []string { return []string{url} }, http.Header{"Accept-Encoding": {"gzip"}})(ctx, r)
		},
	},
	{
		Name: "redis", Image: workloadimages.Redis, Replicas: 1,
		Cmd:    func(_, port, _ int) []string { return []string{"--port", fmt.Sprint(port)} },
		Loads:  []string{"redis-benchmark"},
		Ready:  waitTCP,
		Client: redisClient,
	},
	{
		// No client: the working set waves between 32 and 192 MiB every 20 s.
		Name: "memwave", Image: workloadimages.Memwave, Replicas: 1, NoClient: true,
		Cmd:   func(_, _, _ int) []string { return []string{"-min", "32", "-max", "192", "-period", "20s"} },
		Loads: []string{"wave"},
		Ready: func(context.Context, []int) error { return nil },
		Client: func(ctx context.Context, r ClientRun) (load.Result, error) {
			select {
			case <-ctx.Done():
				return load.Result{}, ctx.Err()
			case <-time.After(r.Duration):
			}
			return load.Result{Tool: "none", Shape: "wave", DurationS: r.Duration.Seconds()}, nil
		},
	},
}

// redisClient runs redis-benchmark (closed loop, SET and GET, 10 clients)
// in chunks of 20000 requests until d has passed. Chunks are combined as
// total requests over total time; p50 is the chunks' mean, p99, p99.9 and
// max are their maxima (conservative).
func redisClient(ctx context.Context, r ClientRun) (load.Result, error) {
	ports, d := r.Ports, r.Duration
	start := time.Now()
	out := load.Result{Tool: "redis-benchmark", Shape: "closed", Test: "SET+GET"}
	var p50 float64
	n := 0
	for time.Since(start) < d {
		rs, err := load.RunRedisBenchmark(ctx, load.RedisRun{Port: ports[0], Clients: 10, Requests: 20000, Tests: []string{"set", "get"}})
		if err != nil {
			return out, err
		}
		for _, r := range rs {
			out.Requests += r.Requests
			out.Successes += r.Successes
			out.DurationS += r.DurationS
			p50 += r.P50Us
			n++
			out.MeanUs += r.MeanUs
			out.P99Us = max(out.P99Us, r.P99Us)
			out.P999Us = max(out.P999Us, r.P999Us)
			out.MaxUs = max(out.MaxUs, r.MaxUs)
		}
	}
	if n > 0 {
		out.P50Us = p50 / float64(n)
		out.MeanUs /= float64(n)
	}
	if out.DurationS > 0 {
		out.ThroughputRPS = float64(out.Successes) / out.DurationS
	}
	return out, nil
}

// WorkloadByName finds a workload.
func WorkloadByName(name string) (Workload, bool) {
	for _, w := range Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}
