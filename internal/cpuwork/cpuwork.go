// Package cpuwork is the unit of CPU work of the project's test services
// (demo-http's /cpu, /chain and the PEMA app): rounds of SHA-256 over a
// 32-byte buffer, and how many of them one millisecond of one core does.
package cpuwork

import (
	"crypto/sha256"
	"errors"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// PerMs measures SHA-256 rounds per ms of the calling thread's own CPU
// time: the median of windows of each of CPU time. CPU time, not wall
// time, so neither a CPU limit (a throttled window counts nothing) nor the
// machine's other jobs change the figure: every copy of a service does the
// same work per request whatever quota it started under (a wall-clock
// calibration under a 0.25-core quota measured about half the true rate,
// and copies of one service in one benchmark run did up to 2.5× different
// work; bench/pema, 2026-11-25).
func PerMs(windows int, each time.Duration) (int, error) {
	if windows < 1 || each <= 0 {
		return 0, errors.New("cpuwork: want at least one window of positive length")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() (time.Duration, error) {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			return 0, err
		}
		return time.Duration(ts.Nano()), nil
	}
	var buf [32]byte
	rates := make([]float64, 0, windows)
	for range windows {
		t0, err := cpu()
		if err != nil {
			return 0, err
		}
		n := 0
		var d time.Duration
		for d < each {
			for range 100 {
				buf = sha256.Sum256(buf[:])
			}
			n += 100
			t, err := cpu()
			if err != nil {
				return 0, err
			}
			d = t - t0
		}
		rates = append(rates, float64(n)/(float64(d)/float64(time.Millisecond)))
	}
	sink = buf[0]
	sort.Float64s(rates)
	return max(int(rates[len(rates)/2]), 1), nil
}

//lint:ignore U1000 written only: keeps the rounds from being optimised away
var sink byte
