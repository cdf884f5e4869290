package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	bp "github.com/escra-dev/escra/bench/pema"
	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/pemaloop"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/pemaapp"
)

// floorCores is every policy's smallest limit (the controller's cpu_floor
// is lowered to it for the PEMA and Escra apps): with six services on
// half a shared core, the default 0.05 was what all of them ended at in
// the first run, which compared floors, not policies.
const floorCores = 0.01

// appParams are the allocator parameters of the bench's escra and pema
// apps: the defaults with the common floor.
func appParams() *allocator.Params {
	p := allocator.DefaultParams()
	p.CPUFloorUs = int64(floorCores * float64(p.PeriodUs()))
	return &p
}

// optm is PEMA's OPTM: local search with the SLO checked over two
// windows per trial, on containers resized through Docker.
func (e *env) optm(name string) (*Phase, error) {
	r, err := e.start("")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	gs, err := bp.Groups(e.ctx, e.cli, r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	cl := &pemaapp.Client{URL: e.url(r.Entry()), Rate: fixedRate(e.o.rps), Seed: e.o.seed + 1000, Timeout: 3 * time.Second}
	done := make(chan struct{})
	t0 := time.Now()
	go func() { defer close(done); cl.Run(ctx) }()
	x0 := make([]float64, len(e.svcs))
	for i := range x0 {
		x0[i] = e.o.omega / float64(len(e.svcs))
	}
	window := func(n int) time.Duration {
		from := time.Since(t0)
		time.Sleep(time.Duration(n) * e.o.optmWindow)
		var lat []time.Duration
		for _, s := range cl.SamplesNow() {
			if s.At >= from && s.At < from+time.Duration(n)*e.o.optmWindow {
				lat = append(lat, s.Latency)
			}
		}
		return pemaapp.P95(lat)
	}
	// A trial holds when the p95 of two consecutive windows pooled meets
	// the SLO: "repeated runs", without one noisy window of this shared
	// machine ending the search (the first run's OPTM stopped at 1.1 cores).
	holds := func(x []float64) bool {
		for i, g := range gs {
			if err := e.setQuota(g, x[i]); err != nil {
				logf("optm: trial %v not applied: %v", fmtX(x), err)
				return false
			}
		}
		time.Sleep(500 * time.Millisecond)
		return window(2) <= e.slo
	}
	x, used := bp.OPTM(x0, 0.05, 0.0125, floorCores, e.o.optmTrials, holds)
	for i, g := range gs {
		e.setQuota(g, x[i])
	}
	cancel()
	<-done
	logf("%s: %.3f cores after %d trials (%v) at SLO %v", name, sum(x), used, fmtX(x), e.slo)
	return &Phase{Name: name, Policy: "optm", Load: "fixed", Final: x, CPU: []float64{sum(x)}, Trials: used, Died: e.died(name, r),
		SLOms: []float64{float64(e.slo) / 1e6}}, nil
}

// ruleTargets are the HPA targets ruleTuned tries, highest first, in
// whole tens of per cent as HPA targets are written.
var ruleTargets = []float64{0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2}

// rule runs RULE for steps intervals. target > 0: PEMA §4.2's RULE, the
// Kubernetes HPA's rule on each container's limit at that utilisation
// target (bp.HPARule, from the mean of its 1 s usage samples over the
// last interval). target 0: §5's description of the Kubernetes rule,
// 1.15 × the p90 of the 1 s usage samples over the last three intervals
// (bp.Rule; the bench's RULE until 2026-12-02, now rule-vpa).
func (e *env) rule(name string, rate func(time.Duration) float64, steps int, target float64) (*Phase, error) {
	r, err := e.start("")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	gs, err := bp.Groups(e.ctx, e.cli, r)
	if err != nil {
		return nil, err
	}
	per := int(e.o.interval / time.Second)
	win := 3 * per
	x := make([]float64, len(gs))
	for j := range x {
		x[j] = e.o.omega / float64(len(gs))
	}
	h := &bp.HPARule{Target: target, Floor: floorCores, Window: 3}
	pol := "rule"
	if target == 0 {
		pol = "rule-vpa"
	}
	ph, err := e.measure(name, pol, r, e.url(r.Entry()), rate, steps, func(i int, s *bp.Sampler) {
		if i == 0 {
			return
		}
		ticks := s.Ticks()
		if target > 0 {
			ticks = ticks[max(0, len(ticks)-per):]
			used := make([]float64, len(gs))
			for _, tk := range ticks {
				for j := range used {
					used[j] += tk.Usage[j] / float64(len(ticks))
				}
			}
			x = h.Next(x, used)
		}
		if len(ticks) > win {
			ticks = ticks[len(ticks)-win:]
		}
		for j, g := range gs {
			if target > 0 {
				e.setQuota(g, x[j])
				continue
			}
			var u []float64
			for _, tk := range ticks {
				u = append(u, tk.Usage[j])
			}
			e.setQuota(g, bp.Rule(u, floorCores))
		}
	})
	if ph != nil {
		ph.Load = load(name)
		ph.Target = target
	}
	return ph, err
}

// ruleTuned is RULE as an operator sets it for this app and SLO (PEMA
// §5: a rule's thresholds need "deep application knowledge"): trial runs
// of 2 × -rule-steps intervals at ruleTargets from the highest down until
// one has at most 5 % of its intervals after the first over the SLO (the
// violation floor; bp.TuneTarget), then a separate measured run at that
// target, so that the measurement is not the trial that happened to hold.
// If none holds RULE runs at the lowest target and TunedOK is false: no
// rule holds the SLO then, and a comparison with it says nothing.
// -rule-target fixes the target instead.
func (e *env) ruleTuned(name string) (*Phase, error) {
	u := e.o.ruleTarget
	var tried [][2]float64
	ok := true
	if u == 0 {
		var err error
		u, ok = bp.TuneTarget(ruleTargets, func(u float64) bool {
			if err != nil {
				return false
			}
			var ph *Phase
			ph, err = e.rule(fmt.Sprintf("%s-try%02.0f", name, 100*u), fixedRate(e.o.rps), 2*e.o.ruleSteps, u)
			if err != nil || len(ph.P95ms) < 2 {
				return false
			}
			v := violPct(ph.P95ms[1:], ph.SLOms[1:])
			tried = append(tried, [2]float64{u, v})
			return v <= 5
		})
		if err != nil {
			return nil, err
		}
		logf("%s: HPA target %.0f %% (tried %v, held: %v) at SLO %v", name, 100*u, tried, ok, e.slo)
	}
	ph, err := e.rule(name, fixedRate(e.o.rps), e.o.ruleSteps, u)
	if ph != nil {
		ph.Tried, ph.TunedOK = tried, ok
	}
	return ph, err
}

// escra is the usage-driven default policy on the same app.
func (e *env) escra(name string, rate func(time.Duration) float64, steps int) (*Phase, error) {
	app := appName(name)
	if err := e.srv.DefineApp(server.AppSpec{Name: app, CPUCores: e.o.omega, MemoryBytes: 1 << 30, Sigma: 0.1, Policy: "escra", Params: appParams()}); err != nil {
		return nil, err
	}
	r, err := e.start(app)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ph, err := e.measure(name, "escra", r, e.url(r.Entry()), rate, steps, nil)
	if ph != nil {
		ph.Load = load(name)
	}
	return ph, err
}

// pemaRun runs policy (pema or pema-guarded) for steps intervals, then
// cuts the SLO to 0.6× for sloSteps more (Fig 20).
func (e *env) pemaRun(name, policy string, rate func(time.Duration) float64, steps, sloSteps int, ranges []float64) (*Phase, error) {
	app := appName(name)
	ports, err := pemaapp.AssignPorts(e.svcs)
	if err != nil {
		return nil, err
	}
	minReq := int(0.5 * e.o.rps / 5.5 * e.o.interval.Seconds())
	slo := &adminapi.SLO{P95: e.slo, Interval: e.o.interval, MinRequests: max(minReq, 50), Listen: "127.0.0.1:0",
		Upstream: fmt.Sprintf("127.0.0.1:%d", ports["front"]), Seed: e.o.seed, Ranges: ranges, MinCPU: floorCores}
	if ranges != nil {
		slo.RangeWidth = (ranges[1] - ranges[0]) / 2
	}
	if err := e.srv.DefineApp(server.AppSpec{Name: app, CPUCores: e.o.omega, MemoryBytes: 1 << 30, Sigma: 0.1,
		Policy: policy, SLO: slo, Params: appParams()}); err != nil {
		return nil, err
	}
	e.phase++
	labels := map[string]string{"escra.bench": "pema", containers.AppLabel: app}
	r, err := pemaapp.Start(e.ctx, e.cli, e.img, fmt.Sprintf("pema-bench-%d-%d", os.Getpid(), e.phase), labels, e.svcs,
		e.o.omega/float64(len(e.svcs)), ports)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for _, id := range r.IDs {
		if e.o.appCPUs != "" {
			if err := bp.SetCpuset(e.ctx, e.cli, id, e.o.appCPUs); err != nil {
				return nil, err
			}
		}
	}
	loop := e.srv.PEMALoop(app)
	if loop == nil {
		return nil, fmt.Errorf("app %s has no pema loop", app)
	}
	// The loop's first tick (re)starts PEMA from the members' quotas;
	// measuring starts then (a record after it, such as pema-guarded's
	// rollback a second later, must not hide it).
	started := func(r pemaloop.Record) bool { return r.Skipped == "started" }
	for !slices.ContainsFunc(loop.Records(), started) {
		time.Sleep(50 * time.Millisecond)
		if e.ctx.Err() != nil {
			return nil, e.ctx.Err()
		}
	}
	origSLO := e.slo
	ph, err := e.measure(name, policy, r, e.url(loop.ProxyAddr()), rate, steps+sloSteps, func(i int, _ *bp.Sampler) {
		if sloSteps > 0 && i == steps {
			e.slo = time.Duration(float64(origSLO) * 0.6)
			if err := loop.SetSLO(e.slo.Seconds()); err != nil {
				logf("set slo: %v", err)
			}
			logf("%s: SLO cut to %v (Fig 20)", name, e.slo)
		}
	})
	if ph != nil {
		// Intervals before the cut are judged against the SLO then, those
		// after it against the new one.
		for i := range ph.SLOms {
			if i < steps {
				ph.SLOms[i] = float64(origSLO) / 1e6
			} else {
				ph.SLOms[i] = float64(e.slo) / 1e6
			}
		}
		ph.Load = load(name)
		ph.Records = loop.Records()
	}
	e.slo = origSLO
	return ph, err
}
