package main

import (
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
)

// unitTicks puts the y axis ticks at round numbers of the panel's
// Grafana unit (100 MiB, not 104.9 MB) and labels them in it.
func unitTicks(unit string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		scale, suffix := unitScale(unit, math.Max(math.Abs(lo), math.Abs(hi)))
		ts := plot.DefaultTicks{}.Ticks(lo/scale, hi/scale)
		for i := range ts {
			ts[i].Value *= scale
			if ts[i].Label != "" {
				ts[i].Label = strconv.FormatFloat(math.Round(ts[i].Value/scale*1000)/1000, 'f', -1, 64) + suffix
			}
		}
		return ts
	})
}

// unitScale is the divisor and suffix for a Grafana unit at magnitude m.
func unitScale(unit string, m float64) (float64, string) {
	switch unit {
	case "bytes":
		units := []string{" B", " KiB", " MiB", " GiB", " TiB"}
		i := 0
		for ; m >= 1024 && i < len(units)-1; m /= 1024 {
			i++
		}
		return math.Pow(1024, float64(i)), units[i]
	case "percentunit":
		return 0.01, "%"
	case "s":
		switch {
		case m < 1e-3:
			return 1e-6, " µs"
		case m < 1:
			return 1e-3, " ms"
		}
		return 1, " s"
	case "ops":
		return 1, " ops/s"
	}
	return 1, ""
}

// timeTicks marks round clock times, about six across the range.
type timeTicks struct{}

func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	steps := []float64{10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if (hi-lo)/s <= 7 {
			step = s
			break
		}
	}
	format := "15:04"
	if step < 60 {
		format = "15:04:05"
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		if v-lo < 0.04*(hi-lo) || hi-v < 0.02*(hi-lo) { // no label under the y axis's or past the end
			continue
		}
		ts = append(ts, plot.Tick{Value: v, Label: time.Unix(int64(v), 0).UTC().Format(format)})
	}
	return ts
}
