// Command gowork is bench-wysiwyg's Go workload: it sizes its worker pool
// with the runtime's default GOMAXPROCS (Go ≥ 1.25 derives it from the
// CPUs it may run on and the cgroup's CPU quota), hashes 64 KiB blocks
// with that many workers for -for, and prints GOMAXPROCS, blocks per
// second and the p99 time of one block.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

func main() {
	d := flag.Duration("for", 10*time.Second, "how long to work")
	flag.Parse()
	if *d <= 0 {
		fmt.Fprintln(os.Stderr, "gowork: -for must be positive")
		os.Exit(2)
	}
	n := runtime.GOMAXPROCS(0)
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	end := time.Now().Add(*d)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				sha256.Sum256(buf)
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p99 := time.Duration(0)
	if len(lat) > 0 {
		p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	fmt.Printf("gomaxprocs=%d ops_per_s=%.1f p99_ms=%.3f\n", n, float64(len(lat))/d.Seconds(), float64(p99)/1e6)
}
