// Command spin burns CPU on N goroutines for a while (or forever), or with
// -idle just sleeps: the CPU-bound and idle workloads of the daemon tests.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	threads := flag.Int("threads", 1, "busy goroutines")
	dur := flag.Duration("for", 0, "run this long (0: until signalled)")
	idle := flag.Bool("idle", false, "sleep instead of burning CPU")
	duty := flag.Float64("duty", 1, "busy share of every -slot per goroutine, (0,1] (a light but steady load)")
	slotFlag := flag.Duration("slot", 100*time.Millisecond, "cycle of -duty (busy, then asleep until the next)")
	flag.Parse()
	if *duty <= 0 || *duty > 1 {
		fmt.Fprintln(os.Stderr, "spin: -duty must be in (0,1]")
		os.Exit(2)
	}
	if *slotFlag <= 0 {
		fmt.Fprintln(os.Stderr, "spin: -slot must be > 0")
		os.Exit(2)
	}
	if *threads < 1 {
		fmt.Fprintln(os.Stderr, "spin: -threads must be >= 1")
		os.Exit(2)
	}
	var sink atomic.Uint64
	if !*idle {
		for i := 0; i < *threads; i++ {
			go func() {
				x := uint64(1)
				slot := *slotFlag
				busy := time.Duration(*duty * float64(slot))
				for {
					start := time.Now()
					for *duty >= 1 || time.Since(start) < busy {
						for j := 0; j < 1<<14; j++ {
							x = x*6364136223846793005 + 1442695040888963407
						}
						sink.Add(x & 1)
						if *duty >= 1 {
							break
						}
					}
					if *duty < 1 {
						time.Sleep(slot - time.Since(start))
					}
				}
			}()
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var timeout <-chan time.Time
	if *dur > 0 {
		timeout = time.After(*dur)
	}
	select {
	case <-sig:
	case <-timeout:
	}
}
