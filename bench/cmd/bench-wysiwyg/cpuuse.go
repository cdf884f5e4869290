package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/procstat"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

// usage is what a container got while a load ran, and what else its CPUs
// did: the floor comparison is fair only if the allocation binds (cores
// near 1, appIdle near 0) and the app's CPUs were not taken by others.
type usage struct {
	cores, throttledPct float64
	appCPUs             wysiwyg.CPUSet // the container's cpuset during the run
	appIdle             float64        // idle time on appCPUs, in cores
	appOthers           float64        // busy time on appCPUs not the container's nor wrk's, in cores
	client              float64        // wrk's own CPU (this process's waited children), in cores
}

// cpuUse measures a container's CPU while f runs: cores used (cpuacct),
// the share of CFS periods it was throttled in, and the idle and foreign
// time on the CPUs of its cpuset (/proc/stat). A quota that never
// throttles did not bind: the container was held back by something else
// (its client, or the host's other load on its cores).
func (e *env) cpuUse(ctx context.Context, id string, f func() error) (usage, error) {
	var r usage
	g, err := e.group(ctx, id)
	if err != nil {
		return r, err
	}
	defer g.Close()
	if r.appCPUs, err = readCPUs(g); err != nil {
		return r, err
	}
	snap := func() (p, t uint64, u int64) {
		var buf [512]byte
		if b, err := g.Read(cgroups.CPUStatFile, buf[:]); err == nil {
			p, _ = cgroups.KeyedValue(b, "nr_periods")
			t, _ = cgroups.KeyedValue(b, "nr_throttled")
		}
		u, _ = g.ReadInt(cgroups.CPUAcctUsage)
		return
	}
	children := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	p0, t0, u0 := snap()
	s0, c0 := procStat(), children()
	start := time.Now()
	if err := f(); err != nil {
		return r, err
	}
	p1, t1, u1 := snap()
	s1, c1 := procStat(), children()
	wall := float64(time.Since(start).Nanoseconds())
	r.cores = float64(u1-u0) / wall
	r.client = float64(c1-c0) / wall
	if p1 > p0 {
		r.throttledPct = 100 * float64(t1-t0) / float64(p1-p0)
	}
	var busy, idle float64
	for _, c := range r.appCPUs {
		a, b := s0[c], s1[c]
		busy += b.Busy - a.Busy
		idle += b.Idle - a.Idle
	}
	if tot := busy + idle; tot > 0 {
		n := float64(len(r.appCPUs))
		r.appIdle = n * idle / tot
		r.appOthers = n*busy/tot - r.cores
		if r.appCPUs.Has(0) { // wrk is pinned on CPU 0
			r.appOthers -= r.client
		}
		r.appOthers = max(r.appOthers, 0)
	}
	return r, nil
}

// procTimes reads the CPU time (utime+stime, in ticks) of each process
// of a container.
func (e *env) procTimes(ctx context.Context, id string) map[int]uint64 {
	g, err := e.group(ctx, id)
	if err != nil {
		return nil
	}
	defer g.Close()
	b, err := os.ReadFile(filepath.Join(g.Paths.CPU, "cgroup.procs"))
	if err != nil {
		return nil
	}
	m := map[int]uint64{}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		st, err := procstat.Read(pid)
		if err != nil {
			continue
		}
		m[pid] = st.CPUTicks()
	}
	return m
}

// busyProcs counts the processes that used at least 10 % of a core over d
// (USER_HZ = 100 ticks per second).
func busyProcs(a, b map[int]uint64, d time.Duration) int {
	n := 0
	for pid, t1 := range b {
		if float64(t1-a[pid]) >= 0.1*100*d.Seconds() {
			n++
		}
	}
	return n
}

// procStat reads each CPU's busy and idle time (idle + iowait) from
// /proc/stat; nil when unreadable.
func procStat() map[int]procstat.CPU {
	m, _ := procstat.CPUs()
	return m
}
