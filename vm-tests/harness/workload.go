package harness

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

// Workload is a subcommand a guest binary runs inside a cgroup:
// Cgroup.Start re-executes /proc/self/exe with its name and arguments.
type Workload func(args []string) int

// RunWorkload runs the workload os.Args[1] names, if any of ws, and exits
// with its status; otherwise it returns.
func RunWorkload(ws map[string]Workload) {
	if len(os.Args) > 1 {
		if fn, ok := ws[os.Args[1]]; ok {
			os.Exit(fn(os.Args[2:]))
		}
	}
}

// HogCPU spins until killed.
func HogCPU([]string) int {
	x := 0
	for {
		x++
	}
}

// Busy spins args[0] ms of wall time every args[1] ms, until killed.
func Busy(args []string) int {
	burn := time.Duration(AtoiArg(args, 0, 10)) * time.Millisecond
	every := time.Duration(AtoiArg(args, 1, 100)) * time.Millisecond
	next := time.Now()
	for {
		for start := time.Now(); time.Since(start) < burn; {
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
}

// HogMem touches args[0] MiB page by page, then exits 0.
func HogMem(args []string) int {
	n := AtoiArg(args, 0, 64)
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	runtime.KeepAlive(b)
	fmt.Printf("hog-mem: touched %d MiB\n", n)
	return 0
}

// AtoiArg is args[i] as an int, or def when absent or not a number.
func AtoiArg(args []string, i int, def int) int {
	if len(args) <= i {
		return def
	}
	n, err := strconv.Atoi(args[i])
	if err != nil {
		return def
	}
	return n
}
