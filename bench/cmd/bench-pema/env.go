package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	bp "github.com/escra-dev/escra/bench/pema"
	"github.com/escra-dev/escra/controller/pemaloop"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/pemaapp"
)

// env is what every phase shares.
type env struct {
	o     opts
	cli   *client.Client
	img   string
	srv   *server.Server
	svcs  []pemaapp.Service
	slo   time.Duration
	ctx   context.Context
	phase int
	// ruleTarget: the HPA target RULE was tuned to at the bench's SLO,
	// for its daily curve.
	ruleTarget float64
}

// Phase is one policy's run.
type Phase struct {
	Name    string            `json:"name"`
	Policy  string            `json:"policy"`
	Load    string            `json:"load"`
	SLOms   []float64         `json:"slo_ms"`  // per interval
	P95ms   []float64         `json:"p95_ms"`  // client-side, per interval
	RPS     []float64         `json:"rps"`     // per interval
	CPU     []float64         `json:"cpu"`     // Σ quota, mean per interval
	Usage   []float64         `json:"usage"`   // Σ usage, mean per interval
	Final   []float64         `json:"final_x"` // per service at the end
	Records []pemaloop.Record `json:"pema,omitempty"`
	Trials  int               `json:"optm_trials,omitempty"`
	Died    []string          `json:"died,omitempty"`          // services whose container had stopped by the end
	Rep     int               `json:"rep,omitempty"`           // repetition, 1-based (0: a run before repetitions)
	Set     string            `json:"set,omitempty"`           // "slo2": at -slo2
	Target  float64           `json:"rule_target,omitempty"`   // RULE: the HPA target (0: rule-vpa)
	Tried   [][2]float64      `json:"rule_tried,omitempty"`    // RULE's tuning: (target, % of intervals violated) per trial
	TunedOK bool              `json:"rule_tuned_ok,omitempty"` // RULE: its target holds the SLO (or was fixed by -rule-target)
}

// removeOurs force-removes the containers this process started (by name
// prefix: pema-bench-<pid>-).
func removeOurs(cli *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return
	}
	prefix := fmt.Sprintf("/pema-bench-%d-", os.Getpid())
	for _, c := range list.Items {
		for _, n := range c.Names {
			if strings.HasPrefix(n, prefix) {
				_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
				break
			}
		}
	}
}

// start runs the app's containers (labelled into app when app != "").
func (e *env) start(app string) (*pemaapp.Running, error) {
	e.phase++
	ports, err := pemaapp.AssignPorts(e.svcs)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"escra.bench": "pema"}
	if app != "" {
		labels[containers.AppLabel] = app
	}
	prefix := fmt.Sprintf("pema-bench-%d-%d", os.Getpid(), e.phase)
	r, err := pemaapp.Start(e.ctx, e.cli, e.img, prefix, labels, e.svcs, e.o.omega/float64(len(e.svcs)), ports)
	if err != nil {
		return nil, err
	}
	for _, id := range r.IDs {
		// The app's containers share the app CPU(s), off the client's.
		if e.o.appCPUs != "" {
			if err := bp.SetCpuset(e.ctx, e.cli, id, e.o.appCPUs); err != nil {
				r.Close()
				return nil, err
			}
		}
	}
	return r, nil
}

// measure runs the client against url for steps intervals while the
// sampler records the allocation; during(i) runs at the start of each
// interval i (RULE acts there).
func (e *env) measure(name, policy string, r *pemaapp.Running, url string, rate func(time.Duration) float64, steps int,
	during func(i int, s *bp.Sampler)) (*Phase, error) {
	gs, err := bp.Groups(e.ctx, e.cli, r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	start := time.Now()
	cl, smp, wait := drive(ctx, url, rate, e.o.seed+uint64(e.phase), gs, start)
	for i := range steps {
		if during != nil {
			during(i, smp)
		}
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * e.o.interval)))
	}
	cancel()
	wait()
	span := time.Duration(steps) * e.o.interval
	ph := &Phase{Name: name, Policy: policy}
	for _, w := range pemaapp.Windows(cl.Samples(), e.o.interval, span) {
		ph.P95ms = append(ph.P95ms, float64(w.P95)/1e6)
		ph.RPS = append(ph.RPS, w.RPS)
		ph.SLOms = append(ph.SLOms, float64(e.slo)/1e6)
	}
	ticks := smp.Ticks()
	for i := range steps {
		var c, u, n float64
		for _, tk := range ticks {
			if tk.At > time.Duration(i)*e.o.interval && tk.At <= time.Duration(i+1)*e.o.interval {
				c += sum(tk.Quota)
				u += sum(tk.Usage)
				n++
			}
		}
		ph.CPU = append(ph.CPU, c/math.Max(n, 1))
		ph.Usage = append(ph.Usage, u/math.Max(n, 1))
	}
	if len(ticks) > 0 {
		ph.Final = ticks[len(ticks)-1].Quota
	}
	ph.Died = e.died(name, r)
	logf("%s: cpu %.2f → %.2f cores, usage %.2f, p95 median %.1f ms, SLO %v violated in %.0f%% of %d intervals (load average %s)",
		name, first(ph.CPU), last(ph.CPU), mean(ph.Usage), median(ph.P95ms), e.slo, violPct(ph.P95ms, ph.SLOms), steps, loadavg())
	return ph, nil
}

// died lists the app's services that stopped during a phase, and says so.
func (e *env) died(phase string, r *pemaapp.Running) []string {
	d, err := r.Died(e.ctx)
	if err != nil {
		logf("%s: could not inspect the app's containers: %v", phase, err)
	}
	if len(d) > 0 {
		logf("%s: WARNING: %d service(s) stopped during the phase: %s; its figures measure a broken app", phase, len(d), strings.Join(d, ", "))
	}
	return d
}

// drive starts the open-loop client against url and a sampler of gs
// every second, both until ctx ends; wait returns once both stopped.
func drive(ctx context.Context, url string, rate func(time.Duration) float64, seed uint64, gs []*bp.Group, start time.Time) (*pemaapp.Client, *bp.Sampler, func()) {
	cl := &pemaapp.Client{URL: url, Rate: rate, Seed: seed, Timeout: 3 * time.Second}
	smp := &bp.Sampler{Groups: gs}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cl.Run(ctx) }()
	go func() { defer wg.Done(); smp.Run(ctx, start, time.Second) }()
	return cl, smp, wg.Wait
}

// fixed runs the app at its ample start, nobody resizing it.
func (e *env) fixed(name, policy string, steps int) (*Phase, error) {
	r, err := e.start("")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return e.measure(name, policy, r, e.url(r.Entry()), fixedRate(e.o.rps), steps, nil)
}

func (e *env) url(hostport string) string {
	return fmt.Sprintf("http://%s/chain?ms=%d", hostport, e.o.ms)
}

// setQuota sets g's limit through Docker, as an operator or a VPA would
// (RULE and OPTM), with the run's CFS burst beside it.
func (e *env) setQuota(g *bp.Group, cores float64) error {
	_, err := bp.SetQuotaBurst(e.ctx, e.cli, g, cores, 100000, e.o.burst)
	return err
}
