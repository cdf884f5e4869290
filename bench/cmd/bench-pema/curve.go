package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bp "github.com/escra-dev/escra/bench/pema"
	"github.com/escra-dev/escra/internal/pemaapp"
)

// CurvePoint is the app at one fixed allocation: every service's quota
// is Factor × its own usage measured at the ample start.
type CurvePoint struct {
	Factor   float64   `json:"factor"`
	PeriodUs int64     `json:"cfs_period_us"`
	Burst    float64   `json:"burst"` // cfs burst as a fraction of the quota
	Cores    float64   `json:"cores"` // Σ quota
	Usage    float64   `json:"usage"` // Σ usage, mean over the point
	P95ms    []float64 `json:"p95_ms"`
}

// Curve is the `-only curve` phase: p95 against allocation, the shape
// PEMA walks down (PEMA Fig 7b assumes a slope; docs/pema-runs.md, "The
// latency curve PEMA walks", found a cliff). Not part of `make bench-pema`.
type Curve struct {
	UsageCores []float64    `json:"usage_cores"` // per service, ample start
	RuleCores  []float64    `json:"rule_cores"`  // RULE's limit per service from the same samples
	Points     []CurvePoint `json:"points"`
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// curveFlags parses -curve, -curve-periods and -curve-burst.
func curveFlags(o opts) ([]float64, []int64, []float64, error) {
	factors, err := parseList(o.curveFactors, func(s string) (float64, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err == nil && !(f > 0 && f <= 10) {
			err = fmt.Errorf("factor %v outside (0, 10]", f)
		}
		return f, err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-curve: %w", err)
	}
	periods, err := parseList(o.curvePeriods, func(s string) (int64, error) {
		p, err := strconv.ParseInt(s, 10, 64)
		if err == nil && (p < 1000 || p > 1000000) {
			err = fmt.Errorf("period %d µs outside [1000, 1000000]", p)
		}
		return p, err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-curve-periods: %w", err)
	}
	bursts, err := parseList(o.curveBursts, func(s string) (float64, error) {
		f, err := strconv.ParseFloat(s, 64)
		if err == nil && !(f >= 0 && f <= 1) {
			err = fmt.Errorf("burst %v outside [0, 1]", f)
		}
		return f, err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-curve-burst: %w", err)
	}
	if o.curveDur < 5*time.Second {
		return nil, nil, nil, fmt.Errorf("-curve-duration %v: want at least 5s", o.curveDur)
	}
	return factors, periods, bursts, nil
}

// curve measures the app's usage at the ample start, then runs it at
// each factor × that usage (per service) under each CFS period, for
// o.curveDur per point, the p95 read per 5 s window.
func (e *env) curve() (*Curve, error) {
	factors, periods, bursts, err := curveFlags(e.o)
	if err != nil {
		return nil, err
	}
	r, err := e.start("")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	gs, err := bp.Groups(e.ctx, e.cli, r)
	if err != nil {
		return nil, err
	}
	url := e.url(r.Entry())
	// The other phases' clients use seed+phase and seed+1000.
	seed := e.o.seed + 2000
	e.runFixed(url, gs, 10*time.Second, seed) // connections and caches warm
	c := &Curve{}
	ws, ticks := e.runFixed(url, gs, e.o.curveDur, seed+1)
	for i := range gs {
		var v []float64
		for _, t := range ticks {
			v = append(v, t.Usage[i])
		}
		c.UsageCores = append(c.UsageCores, mean(v))
		c.RuleCores = append(c.RuleCores, bp.Rule(v, floorCores))
	}
	logf("curve: usage at the ample start %.3f cores (per service %.3f), RULE's limits %.3f cores, p95 %s ms",
		sum(c.UsageCores), c.UsageCores, sum(c.RuleCores), p95s(ws))
	for _, f := range factors {
		for _, per := range periods {
			for _, b := range bursts {
				pt, err := e.curvePoint(c, r, gs, url, f, per, b, &seed)
				if err != nil {
					return nil, err
				}
				c.Points = append(c.Points, pt)
				writeJSON(filepath.Join(e.o.out, "curve.json"), c)
			}
		}
	}
	return c, nil
}

// curvePoint runs the app with every service at f × its usage, CFS period
// per and burst b × quota.
func (e *env) curvePoint(c *Curve, r *pemaapp.Running, gs []*bp.Group, url string, f float64, per int64, b float64, seed *uint64) (CurvePoint, error) {
	pt := CurvePoint{Factor: f, PeriodUs: per, Burst: b}
	for i, g := range gs {
		set, err := bp.SetQuotaBurst(e.ctx, e.cli, g, f*c.UsageCores[i], per, b)
		if err != nil {
			return pt, err
		}
		pt.Cores += set
	}
	time.Sleep(2 * time.Second) // the queue of the previous point drains
	*seed++
	ws, ticks := e.runFixed(url, gs, e.o.curveDur, *seed+1)
	for _, t := range ticks {
		pt.Usage += sum(t.Usage) / float64(len(ticks))
	}
	for _, w := range ws {
		pt.P95ms = append(pt.P95ms, float64(w.P95)/1e6)
	}
	logf("curve: %.2f × usage, period %d µs, burst %.2f × quota: %.3f cores, usage %.3f, p95 per 5 s %s ms", f, per, b, pt.Cores, pt.Usage, p95s(ws))
	return pt, nil
}

// runFixed runs the fixed-rate client for d and returns its 5 s windows
// and the groups' 1 s samples.
func (e *env) runFixed(url string, gs []*bp.Group, d time.Duration, seed uint64) ([]pemaapp.Window, []bp.Tick) {
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	cl, smp, wait := drive(ctx, url, fixedRate(e.o.rps), seed, gs, time.Now())
	wait()
	return pemaapp.Windows(cl.Samples(), 5*time.Second, d), smp.Ticks()
}

func p95s(ws []pemaapp.Window) string {
	var s []string
	for _, w := range ws {
		s = append(s, fmt.Sprintf("%.1f", float64(w.P95)/1e6))
	}
	return strings.Join(s, " ")
}
