package load

import (
	"context"
	"errors"
	"sync"
	"time"
)

// RunHTTPMix runs several attacks at once (each its own shape and URLs,
// e.g. two services of one app bursting half a cycle apart) and reduces
// them to one Result over every request: the latency quantiles are those
// of the union, not a combination of per-attack quantiles.
func RunHTTPMix(ctx context.Context, runs []HTTPRun) (Result, error) {
	if len(runs) == 0 {
		return Result{}, errors.New("load: no attack in the mix")
	}
	type one struct {
		res         Result
		lat         []time.Duration
		first, last time.Time
		err         error
	}
	got := make([]one, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &got[i]
			o.res, o.lat, o.first, o.last, o.err = attack(ctx, r)
		}()
	}
	wg.Wait()
	out := Result{Tool: "vegeta", Shape: "mix"}
	var lat []time.Duration
	var first, last time.Time
	var errs []error
	for _, o := range got {
		errs = append(errs, o.err)
		out.Requests += o.res.Requests
		out.Successes += o.res.Successes
		lat = append(lat, o.lat...)
		if !o.first.IsZero() && (first.IsZero() || o.first.Before(first)) {
			first = o.first
		}
		if o.last.After(last) {
			last = o.last
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if !first.IsZero() {
		out.DurationS = last.Sub(first).Seconds()
	}
	if out.DurationS > 0 {
		out.ThroughputRPS = float64(out.Successes) / out.DurationS
	}
	out.fillLatencies(lat)
	return out, nil
}
