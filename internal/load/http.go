package load

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// SchedulePacer is a vegeta.Pacer that sends hit i at Offsets[i] and stops
// after the last. vegeta spawns workers as needed (no MaxWorkers), so a slow
// server does not delay later sends: latency is measured for every request
// at the time it was due, without coordinated omission.
type SchedulePacer struct {
	Offsets []time.Duration
	Shape   Shape
}

func (p SchedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p.Offsets)) {
		return 0, true
	}
	return p.Offsets[hits] - elapsed, false
}

func (p SchedulePacer) Rate(elapsed time.Duration) float64 {
	if p.Shape == nil {
		return 0
	}
	return p.Shape.Rate(elapsed)
}

// HTTPRun describes one open-loop HTTP run.
type HTTPRun struct {
	URL      string   // must be a loopback address
	URLs     []string // instead of URL: requests go round-robin over these
	Shape    Shape
	Duration time.Duration
	Timeout  time.Duration // per request; 5 s when zero
	Header   http.Header
	// Progress, when set, gets one line every ~5 s.
	Progress func(string)
}

// CheckLoopback refuses any target outside 127.0.0.0/8 (house rule).
func CheckLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("target %q: %v", raw, err)
	}
	h := u.Hostname()
	if h != "localhost" && (len(h) < 4 || h[:4] != "127.") {
		return fmt.Errorf("target %q: only 127.0.0.0/8 is allowed", raw)
	}
	return nil
}

// RunHTTP runs the attack and reduces it to a Result. Latencies count every
// request, failed ones included (a timeout is the latency a user saw).
func RunHTTP(ctx context.Context, r HTTPRun) (Result, error) {
	res, lat, _, _, err := attack(ctx, r)
	if err == nil {
		res.fillLatencies(lat)
	}
	return res, err
}

// attack runs one attack and returns its counts, raw latencies and the
// first send and last end.
func attack(ctx context.Context, r HTTPRun) (res Result, lat []time.Duration, first, last time.Time, err error) {
	urls := r.URLs
	if len(urls) == 0 {
		urls = []string{r.URL}
	}
	var targets []vegeta.Target
	for _, u := range urls {
		if err := CheckLoopback(u); err != nil {
			return Result{}, nil, first, last, err
		}
		targets = append(targets, vegeta.Target{Method: "GET", URL: u, Header: r.Header})
	}
	if r.Timeout <= 0 {
		r.Timeout = 5 * time.Second
	}
	offsets := r.Shape.Schedule(r.Duration)
	res = Result{Tool: "vegeta", Shape: r.Shape.Name()}
	if len(offsets) == 0 {
		return res, nil, first, last, fmt.Errorf("shape %s sends nothing in %s", r.Shape.Name(), r.Duration)
	}
	atk := vegeta.NewAttacker(vegeta.Timeout(r.Timeout), vegeta.KeepAlive(true),
		vegeta.Workers(32), vegeta.Connections(1000), vegeta.Redirects(vegeta.NoFollow))
	tgt := vegeta.NewStaticTargeter(targets...)
	lat = make([]time.Duration, 0, len(offsets))
	lastLog := time.Now()
	ch := atk.Attack(tgt, SchedulePacer{Offsets: offsets, Shape: r.Shape}, r.Duration+r.Timeout, r.Shape.Name())
	for {
		select {
		case <-ctx.Done():
			atk.Stop()
			for range ch {
			}
			return res, lat, first, last, ctx.Err()
		case hit, ok := <-ch:
			if !ok {
				if !first.IsZero() {
					res.DurationS = last.Sub(first).Seconds()
				}
				if res.DurationS > 0 {
					res.ThroughputRPS = float64(res.Successes) / res.DurationS
				}
				return res, lat, first, last, nil
			}
			res.Requests++
			if hit.Error == "" && hit.Code >= 200 && hit.Code < 400 {
				res.Successes++
			}
			lat = append(lat, hit.Latency)
			if first.IsZero() || hit.Timestamp.Before(first) {
				first = hit.Timestamp
			}
			if end := hit.End(); end.After(last) {
				last = end
			}
			if r.Progress != nil && time.Since(lastLog) >= 5*time.Second {
				lastLog = time.Now()
				r.Progress(fmt.Sprintf("%s: %d/%d requests sent, %d ok", r.Shape.Name(), res.Requests, len(offsets), res.Successes))
			}
		}
	}
}
