package matrix

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/escra-dev/escra/internal/load"
)

// The offset cells: apps whose containers peak apart, where one app budget
// moved between containers every 100 ms can serve a burst in one from a
// sibling idle at that moment (Escra §VI-C). Their containers share the
// app's cpuset, larger than their budget, so the quota binds. The report
// keeps them apart from the cells whose containers peak together.

// Stream is one request stream of an offset cell: its schedule, its
// URLs and the CPU each request costs in each container (for the offline
// model, DemandModel; measured costs vary by a few tenths of a ms).
type Stream struct {
	Shape  load.Shape
	URLs   []string
	CostMs []float64 // per replica
}

// offsetShape is a shape shifted by Off: its offset-t request is the
// inner shape's at t + Off (a sibling's burst half a cycle later).
type offsetShape struct {
	inner load.Shape
	Off   time.Duration
}

func (o offsetShape) Name() string                 { return o.inner.Name() }
func (o offsetShape) Rate(t time.Duration) float64 { return o.inner.Rate(t + o.Off) }
func (o offsetShape) Schedule(d time.Duration) []time.Duration {
	var out []time.Duration
	for _, t := range o.inner.Schedule(d + o.Off) {
		if t >= o.Off {
			out = append(out, t-o.Off)
		}
	}
	return out
}

// periodicShape is a job that wakes every Every (first at Phase) and sends
// Count requests Spacing apart: a periodic CPU worker's work items.
type periodicShape struct {
	Every, Phase, Spacing time.Duration
	Count                 int
}

func (p periodicShape) Name() string { return "periodic" }
func (p periodicShape) Rate(t time.Duration) float64 {
	if in := (t - p.Phase) % p.Every; t >= p.Phase && in < time.Duration(p.Count)*p.Spacing {
		return float64(time.Second) / float64(p.Spacing)
	}
	return 0
}
func (p periodicShape) Schedule(d time.Duration) []time.Duration {
	var out []time.Duration
	for s := p.Phase; s < d; s += p.Every {
		for i := range p.Count {
			if t := s + time.Duration(i)*p.Spacing; t < d {
				out = append(out, t)
			}
		}
	}
	return out
}

func cycleOf(r ClientRun) time.Duration {
	if r.BurstCycle > 0 {
		return r.BurstCycle
	}
	return 20 * time.Second
}

// halfBurst is the Burst shape with a calm first half and a burst second
// half of every cycle.
func halfBurst(base, burst float64, r ClientRun, seed int64) load.Burst {
	c := cycleOf(r)
	return load.Burst{Base: base, BurstRPS: burst, Every: c, BurstLen: c / 2, Seed: seed}
}

func url(port int, path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", port, path) }

// OffsetWorkloads are the offset cells' applications (demo-http
// containers driven by several request streams at once).
var OffsetWorkloads = []Workload{
	{
		// Two services of one app, each 3 ms of CPU per request, bursting
		// (≈ 0.2 core) half a cycle apart; calm they need ≈ 0.02 core.
		Name: "offset-pair", Image: demoImage, Replicas: 2, Offset: true,
		Cmd:   plainDemo,
		Loads: []string{"burst"},
		Ready: waitHTTP("/healthz"),
		Streams: func(r ClientRun) []Stream {
			return []Stream{
				{Shape: halfBurst(5, 60, r, r.Seed), URLs: []string{url(r.Ports[0], "/cpu?ms=3")}, CostMs: []float64{3.3, 0}},
				{Shape: offsetShape{halfBurst(5, 60, r, r.Seed+7), cycleOf(r) / 2}, URLs: []string{url(r.Ports[1], "/cpu?ms=3")}, CostMs: []float64{0, 3.3}},
			}
		},
	},
	{
		// A front end under a steady Poisson load (≈ 0.13 core) and a CPU
		// worker of the same app whose job wakes once a cycle and sends
		// itself 40 work items of 10 ms within 0.2 s.
		Name: "front-worker", Image: demoImage, Replicas: 2, Offset: true,
		Cmd:   plainDemo,
		Loads: []string{"periodic"},
		Ready: waitHTTP("/healthz"),
		Streams: func(r ClientRun) []Stream {
			c := cycleOf(r)
			return []Stream{
				{Shape: load.Exp{RPS: 40, Seed: r.Seed}, URLs: []string{url(r.Ports[0], "/cpu?ms=3")}, CostMs: []float64{3.3, 0}},
				{Shape: periodicShape{Every: c, Phase: c / 2, Spacing: 5 * time.Millisecond, Count: 40},
					URLs: []string{url(r.Ports[1], "/cpu?ms=10")}, CostMs: []float64{0, 10.3}},
			}
		},
	},
	{
		// A fan-out app: a front end (1 ms a request) calls one of two
		// back ends (4 ms a request); the request mix shifts from one back
		// end to the other every half cycle while the total stays ≈ 40/s.
		Name: "fanout", Image: demoImage, Replicas: 3, Offset: true,
		Cmd: func(i, port, _ int) []string {
			args := []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)}
			if i == 0 {
				return append(args, "-next", fmt.Sprintf("http://127.0.0.1:%d,http://127.0.0.1:%d", port+1, port+2))
			}
			return append(args, "-scale", "4")
		},
		Loads: []string{"shift"},
		Ready: waitHTTP("/healthz"),
		Streams: func(r ClientRun) []Stream {
			return []Stream{
				{Shape: halfBurst(5, 35, r, r.Seed), URLs: []string{url(r.Ports[0], "/fan?ms=1&to=0")}, CostMs: []float64{1.5, 4.3, 0}},
				{Shape: offsetShape{halfBurst(5, 35, r, r.Seed+7), cycleOf(r) / 2}, URLs: []string{url(r.Ports[0], "/fan?ms=1&to=1")}, CostMs: []float64{1.5, 0, 4.3}},
			}
		},
	},
}

func plainDemo(_, port, _ int) []string {
	return []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)}
}

// streamsClient drives every stream of the cell at once; the result's
// latencies are over all requests.
func streamsClient(ctx context.Context, w Workload, r ClientRun) (load.Result, error) {
	var runs []load.HTTPRun
	for _, s := range w.Streams(r) {
		runs = append(runs, load.HTTPRun{URLs: s.URLs, Shape: s.Shape, Duration: r.Duration, Timeout: 5 * time.Second, Progress: r.Progress})
	}
	res, err := load.RunHTTPMix(ctx, runs)
	res.Shape = r.Load
	return res, err
}

// IdleCores is what an idle demo-http container uses in the offline model.
const IdleCores = 0.003

// DemandModel is the offline model of a stream-driven cell: per replica,
// the CPU its requests arriving in each 100 ms would cost (cores), from
// the same schedules the client sends. It stands in for a profiling run
// when none is at hand; a real profile replaces it (bench-replay).
func DemandModel(w Workload, r ClientRun) ([][]float64, error) {
	streams := w.Streams
	if streams == nil {
		streams = w.Modelled
	}
	if streams == nil {
		return nil, fmt.Errorf("%s: no request streams to model", w.Name)
	}
	n := int(math.Ceil(r.Duration.Seconds() * 10))
	out := make([][]float64, w.Replicas)
	for i := range out {
		out[i] = make([]float64, n)
		for j := range out[i] {
			out[i][j] = IdleCores
		}
	}
	for _, s := range streams(r) {
		for _, t := range s.Shape.Schedule(r.Duration) {
			p := int(t / (100 * time.Millisecond))
			for i, c := range s.CostMs {
				if p < n && i < len(out) {
					out[i][p] += c / 100 // ms per 100 ms → cores
				}
			}
		}
	}
	return out, nil
}
