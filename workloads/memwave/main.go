// Command memwave is a memory workload whose working set grows and shrinks
// in a wave (the benchmark's workload 3): it exercises OOM handling and memory slack.
// The resident set follows
//
//	ws(t) = min + (max-min) * (1 - cos(2πt/period)) / 2
//
// stepping every -step; pages are touched when grown and unmapped when
// shrunk, so the cgroup's usage follows ws(t).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"syscall"
	"time"
)

func main() {
	minMiB := flag.Int("min", 32, "smallest working set, MiB")
	maxMiB := flag.Int("max", 256, "largest working set, MiB")
	period := flag.Duration("period", 20*time.Second, "wave period")
	step := flag.Duration("step", 100*time.Millisecond, "time between adjustments")
	touch := flag.Bool("touch", true, "re-touch the whole working set every step (keeps it hot)")
	duration := flag.Duration("duration", 0, "exit after this long (0 = run until killed)")
	flag.Parse()
	if *minMiB < 0 || *maxMiB < *minMiB || *period <= 0 || *step <= 0 {
		fmt.Fprintln(os.Stderr, "memwave: need 0 <= -min <= -max, -period > 0, -step > 0")
		os.Exit(2)
	}
	// Chunks of 1 MiB: growing appends, shrinking drops the tail chunks.
	var chunks [][]byte
	start := time.Now()
	tick := time.NewTicker(*step)
	defer tick.Stop()
	lastLog := time.Time{}
	for now := range tick.C {
		t := now.Sub(start)
		if *duration > 0 && t > *duration {
			return
		}
		phase := 2 * math.Pi * t.Seconds() / period.Seconds()
		want := *minMiB + int(math.Round(float64(*maxMiB-*minMiB)*(1-math.Cos(phase))/2))
		for len(chunks) < want {
			// mmap'd chunks: charged when touched, uncharged at munmap,
			// so the cgroup's usage follows ws(t) without GC lag.
			c, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				fmt.Fprintln(os.Stderr, "memwave: mmap:", err)
				os.Exit(1)
			}
			for i := 0; i < len(c); i += 4096 {
				c[i] = 1
			}
			chunks = append(chunks, c)
		}
		for len(chunks) > want {
			syscall.Munmap(chunks[len(chunks)-1])
			chunks = chunks[:len(chunks)-1]
		}
		if *touch {
			for _, c := range chunks {
				for i := 0; i < len(c); i += 4096 {
					c[i]++
				}
			}
		}
		if now.Sub(lastLog) >= time.Second {
			slog.Info("memwave", "t_s", int(t.Seconds()), "working_set_mib", len(chunks))
			lastLog = now
		}
	}
}
