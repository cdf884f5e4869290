package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/bench/telebench"
	"github.com/escra-dev/escra/daemon/source/kmod"
)

// workloads are subcommands the scenarios start inside cgroups.
var workloads = map[string]func(args []string) int{
	"hog-cpu":       hogCPU,
	"busy":          busy,
	"duty":          duty,
	"hog-mem":       hogMem,
	"unpriv":        unpriv,
	"hog-mem-timed": hogMemTimed,
	"controller":    controllerProc,
	"hog-mem-trace": hogMemTrace,
	"hog-mem-until": hogMemUntil,
	"burst":         burst,
	"owner-hold":    ownerHold,
	"write-file":    writeFile,
	"mmap-file":     mmapFile,
	"mmap-locked":   mmapLocked,
}

// writeFile writes args[1] MiB to the file args[0] with write(2).
func writeFile(args []string) int {
	f, err := os.Create(args[0])
	if err != nil {
		fmt.Println("write-file:", err)
		return 1
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = 1
	}
	for i := 0; i < atoiArg(args, 1, 64); i++ {
		if _, err := f.Write(buf); err != nil {
			fmt.Println("write-file:", err)
			return 1
		}
	}
	return 0
}

// mmapFile maps args[1] MiB of the file args[0] shared and touches every
// page: the charges happen in user page faults.
func mmapFile(args []string) int {
	n := atoiArg(args, 1, 48) << 20
	f, err := os.Create(args[0])
	if err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	defer f.Close()
	if err := f.Truncate(int64(n)); err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	b, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("mmap-file:", err)
		return 1
	}
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	_ = unix.Munmap(b)
	fmt.Printf("mmap-file: touched %d MiB\n", n>>20)
	return 0
}

// hogCPU spins until killed.
func hogCPU([]string) int {
	x := 0
	for {
		x++
	}
}

// busy spins args[0] ms of wall time every args[1] ms, until killed.
func busy(args []string) int {
	burn := time.Duration(atoiArg(args, 0, 10)) * time.Millisecond
	every := time.Duration(atoiArg(args, 1, 100)) * time.Millisecond
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

// duty is a light group's load in the telemetry benchmark: telebench.LightDuty
// of every 100 ms, until killed (the host runs workloads/spin -duty).
func duty([]string) int {
	telebench.Duty(telebench.LightDuty, 100*time.Millisecond)
	return 0
}

// hogMem touches args[0] MiB page by page, then exits 0.
func hogMem(args []string) int {
	n := atoiArg(args, 0, 64)
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	runtime.KeepAlive(b)
	fmt.Printf("hog-mem: touched %d MiB\n", n)
	return 0
}

// unpriv runs as an unprivileged user: mutating commands must fail with
// EPERM, reading statistics must work. Exit 0 when both hold.
func unpriv(args []string) int {
	c, err := kmod.Dial()
	if err != nil {
		fmt.Println("unpriv: dial:", err)
		return 1
	}
	defer c.Close()
	rc := 0
	if err := c.Watch(uint64(atoiArg(args, 0, 1))); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: watch as uid %d: got %v, want EPERM\n", os.Getuid(), err)
		rc = 1
	}
	if err := c.ReplyOOM(1, true); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: oom reply: got %v, want EPERM\n", err)
		rc = 1
	}
	if err := c.Unwatch(1); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: unwatch: got %v, want EPERM\n", err)
		rc = 1
	}
	if _, err := c.Stats(); err != nil {
		fmt.Println("unpriv: stats:", err)
		rc = 1
	}
	// Telemetry tells about every watched cgroup: joining is for admins.
	if err := c.Join(kmod.GroupTelemetry); !errors.Is(err, unix.EPERM) {
		fmt.Printf("unpriv: join %q: got %v, want EPERM\n", kmod.GroupTelemetry, err)
		rc = 1
	}
	return rc
}

// burst burns args[0] ms of CPU time (not wall time: throttled time does
// not count) every args[1] ms of wall time, until killed.
func burst(args []string) int {
	burn := time.Duration(atoiArg(args, 0, 25)) * time.Millisecond
	every := time.Duration(atoiArg(args, 1, 230)) * time.Millisecond
	cpu := func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	next := time.Now()
	for {
		for c0 := cpu(); cpu()-c0 < burn; {
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
}

// ownerHold is a second daemon: it watches cgroup args[0] through its own
// owner socket, prints every OOM request it gets and answers none.
func ownerHold(args []string) int {
	id, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		fmt.Println("owner-hold:", err)
		return 2
	}
	o, err := kmod.DialOwner()
	if err != nil {
		fmt.Println("owner-hold:", err)
		return 1
	}
	if err := o.Watch(id); err != nil {
		fmt.Println("owner-hold:", err)
		return 1
	}
	fmt.Println("owner-hold: watching")
	for req := range o.Requests() {
		fmt.Printf("owner-hold: request %d\n", req.ID)
	}
	return 0
}
