package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// sampleLoad records the 1-minute load average every period until ctx
// ends; the returned func gives the samples so far.
func sampleLoad(ctx context.Context, period time.Duration) func() []float64 {
	var mu sync.Mutex
	var v []float64
	rec := func() {
		var l float64
		if _, err := fmt.Sscanf(loadavg(), "%g", &l); err == nil {
			mu.Lock()
			v = append(v, l)
			mu.Unlock()
		}
	}
	rec()
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rec()
			}
		}
	}()
	return func() []float64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]float64(nil), v...)
	}
}

func numCPU() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var a, c int
		if k, _ := fmt.Sscanf(part, "%d-%d", &a, &c); k == 2 {
			n += c - a + 1
		} else {
			n++
		}
	}
	return n
}
