package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Two samplers that read only the containers' cgroup files (v1): under_oom
// episodes and Σ applied limits.

func readGroup(rel, c, f string) string {
	b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", c, rel, f))
	return strings.TrimSpace(string(b))
}

// episode is one stretch of under_oom 1 in a group (tasks waiting at the
// limit for a verdict).
type episode struct {
	group      string
	start, end time.Time
}

func (e episode) ms() float64 { return float64(e.end.Sub(e.start).Microseconds()) / 1000 }

// oomWatch polls memory.oom_control of the groups every 5 ms; an episode
// lasts from the first poll that sees under_oom 1 to the first that sees
// 0, so it is measured to within a poll. Open episodes are closed at ctx's
// end (and count with their length so far).
func oomWatch(ctx context.Context, groups []string) []episode {
	var eps []episode
	open := map[string]time.Time{}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			now := time.Now()
			for g, s := range open {
				eps = append(eps, episode{g, s, now})
			}
			return eps
		case <-t.C:
		}
		now := time.Now()
		for _, g := range groups {
			under := strings.Contains(readGroup(g, "memory", "memory.oom_control"), "under_oom 1")
			s, was := open[g]
			switch {
			case under && !was:
				open[g] = now
			case !under && was:
				eps = append(eps, episode{g, s, now})
				delete(open, g)
			}
		}
	}
}

// within keeps the episodes of group g that began in [from, to).
func within(eps []episode, g string, from, to time.Time) []float64 {
	var ms []float64
	for _, e := range eps {
		if e.group == g && !e.start.Before(from) && e.start.Before(to) {
			ms = append(ms, e.ms())
		}
	}
	sort.Float64s(ms)
	return ms
}

// pct is the nearest-rank percentile of sorted xs (NaN when empty).
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// budgetSampler reads the applied limits of one app's groups from the
// cgroup files every 100 ms and counts samples where their sum exceeds the
// app's budget (CPU: Σ quota/period > Ω; memory: Σ limit > budget). A
// group without a quota (-1) counts as unbounded. A group its escrad has
// put back to its own limits (no controller for --restore-after; escrad
// logs it) is out of Escra's hands and left out of the sum until escrad
// logs the controller back; allViol counts with every group.
type budgetSampler struct {
	groups             []string
	restored           []atomic.Bool
	cpuCores           float64
	memBytes           int64
	mu                 sync.Mutex
	samples, cpuViol   int
	memViol, allViol   int
	maxCPU             float64
	maxMem             int64
	firstViol, lastVio string
	violAt             []time.Time // every sample over budget
	violWhat           []string
}

func newBudgetSampler(groups []string, cpuCores float64, memBytes int64) *budgetSampler {
	return &budgetSampler{groups: groups, restored: make([]atomic.Bool, len(groups)), cpuCores: cpuCores, memBytes: memBytes}
}

// watch is an escrad's onLine for group i.
func (b *budgetSampler) watch(i int) func(string) {
	return func(l string) {
		switch {
		// Only a put-back that wrote everything: one refused (memory
		// below usage) leaves the controller's limit in the group.
		case strings.Contains(l, "limits put back to what Docker knows") && strings.Contains(l, "failed=0"):
			b.restored[i].Store(true)
		case strings.Contains(l, "controller session back"):
			b.restored[i].Store(false)
		}
	}
}

func (b *budgetSampler) run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.sample()
	}
}

func (b *budgetSampler) sample() {
	cpu, mem := 0.0, int64(0)
	allCPU, allMem := 0.0, int64(0)
	var detail []string
	for i, g := range b.groups {
		q, _ := strconv.ParseFloat(readGroup(g, "cpu", "cpu.cfs_quota_us"), 64)
		per, _ := strconv.ParseFloat(readGroup(g, "cpu", "cpu.cfs_period_us"), 64)
		m, _ := strconv.ParseInt(readGroup(g, "memory", "memory.limit_in_bytes"), 10, 64)
		c := math.Inf(1)
		if q >= 0 && per > 0 {
			c = q / per
		}
		allCPU, allMem = allCPU+c, allMem+m
		if !b.restored[i].Load() {
			cpu, mem = cpu+c, mem+m
		}
		detail = append(detail, fmt.Sprintf("%s quota %.0f mem %d MiB restored %v", filepath.Base(g), q, m>>20, b.restored[i].Load()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples++
	b.maxCPU, b.maxMem = math.Max(b.maxCPU, cpu), max(b.maxMem, mem)
	if allCPU > b.cpuCores+1e-6 || allMem > b.memBytes {
		b.allViol++
	}
	bad := false
	if cpu > b.cpuCores+1e-6 {
		b.cpuViol++
		bad = true
	}
	if mem > b.memBytes {
		b.memViol++
		bad = true
	}
	if bad {
		b.violAt = append(b.violAt, time.Now())
		b.violWhat = append(b.violWhat, fmt.Sprintf("cpu %.2f/%.2f cores, memory %d/%d MiB", cpu, b.cpuCores, mem>>20, b.memBytes>>20))
		d := time.Now().UTC().Format("15:04:05.000") + " " + strings.Join(detail, ", ")
		if b.firstViol == "" {
			b.firstViol = d
		}
		b.lastVio = d
	}
}

// window is a run of over-budget samples (gaps under 300 ms joined).
type window struct {
	start, end time.Time
	samples    int
	what       string // the first sample's sums
}

func (b *budgetSampler) windows() []window {
	var ws []window
	for i, t := range b.violAt {
		if n := len(ws); n > 0 && t.Sub(ws[n-1].end) < 300*time.Millisecond {
			ws[n-1].end, ws[n-1].samples = t, ws[n-1].samples+1
			continue
		}
		ws = append(ws, window{start: t, end: t, samples: 1, what: b.violWhat[i]})
	}
	return ws
}
