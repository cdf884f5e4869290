package main

import (
	"math"
	"strings"
	"time"
)

func fixedRate(r float64) func(time.Duration) float64 {
	return func(time.Duration) float64 { return r }
}

// daily is a compressed diurnal curve with a 1:5.5 range and two bursts
// of ~1.9× and ~1.6× (the shape of PEMA Figs 14/18; the Wikipedia
// trace they used is not available offline).
func daily(peak float64, span time.Duration) func(time.Duration) float64 {
	lo := peak / 5.5
	return func(t time.Duration) float64 {
		f := t.Seconds() / span.Seconds()
		base := lo + (peak-lo)*0.5*(1-math.Cos(2*math.Pi*f))
		switch {
		case f > 0.20 && f < 0.27:
			base *= 1.9
		case f > 0.70 && f < 0.77:
			base *= 1.6
		}
		return math.Min(base, peak*1.3)
	}
}

func load(name string) string {
	if strings.Contains(name, "-daily") {
		return "daily"
	}
	return "fixed"
}
