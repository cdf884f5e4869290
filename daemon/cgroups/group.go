package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	cg "github.com/containerd/cgroups/v3"
	cg1 "github.com/containerd/cgroups/v3/cgroup1"
	cg2 "github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Version is the cgroup hierarchy a group's controllers live in.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string { return "v" + strconv.Itoa(int(v)) }

// HostVersion reports which hierarchy holds the cpu and memory controllers
// on this host (hybrid hosts keep them in v1).
func HostVersion() Version {
	if cg.Mode() == cg.Unified {
		return V2
	}
	return V1
}

// Paths are a group's directories: one per v1 controller, or Unified on v2.
type Paths struct {
	Version Version
	CPU     string
	CPUAcct string
	Memory  string
	CPUSet  string
	Unified string

	// How the library finds the group again (Stats, the library write
	// path): v1 its Path, v2 the group relative to the mount.
	v1     cg1.Path
	static string
	group  string
}

// Key is a stable name for the group (its memory or unified directory).
func (p Paths) Key() string {
	if p.Version == V2 {
		return p.Unified
	}
	return p.Memory
}

// Path lookup, the v1/v2 decision and statistics come from
// containerd/cgroups/v3, the library the field uses (containerd, Docker's
// own engine): it reads /proc/PID/cgroup, localizes the paths for nested
// hierarchies and knows the controllers' mount points. Only the write hot
// path below (SetLimits, OOM grants) keeps its own descriptors:
// make bench-daemon measures the library's write path beside it
// (apply_latency_p50_us_cgroups_lib; docs/daemon.md).

// v1Controllers are the v1 hierarchies escrad uses, by Paths field.
var v1Controllers = []cg1.Name{cg1.Cpu, cg1.Cpuacct, cg1.Memory, cg1.Cpuset}

// pather is what the library's v1 controllers have: their directory for
// a cgroup-relative path.
type pather interface{ Path(string) string }

// PathsForPID resolves the groups of a process (a container's init) from
// /proc/PID/cgroup. This works for cgroupfs and systemd drivers alike and
// for any --cgroup-parent, because it reads where the process really is.
func PathsForPID(pid int) (Paths, error) {
	if HostVersion() == V2 {
		g, err := cg2.PidGroupPath(pid)
		if err != nil {
			return Paths{}, fmt.Errorf("cgroups: pid %d: %w", pid, err)
		}
		return v2Paths(g)
	}
	// The library finds each controller's mount in /proc/self/mountinfo;
	// a read that races a mount change elsewhere (the engine mounting
	// another container's rootfs) can miss a line, so look again.
	var p Paths
	var err error
	for try := 0; try < 4; try++ {
		if p, err = v1Paths(cg1.PidPath(pid), ""); !errors.Is(err, cg1.ErrNoCgroupMountDestination) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, err
}

// PathsForCgroup resolves a cgroup given by its path relative to the
// hierarchy root (e.g. "/escra/vm1"), in every controller it exists in.
func PathsForCgroup(rel string) (Paths, error) {
	rel = filepath.Clean("/" + rel)
	if HostVersion() == V2 {
		return v2Paths(rel)
	}
	return v1Paths(cg1.StaticPath(rel), rel)
}

// unifiedMount is where the library expects the v2 hierarchy.
const unifiedMount = "/sys/fs/cgroup"

func v2Paths(group string) (Paths, error) {
	dir := filepath.Join(unifiedMount, group)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return Paths{}, fmt.Errorf("cgroups: %s: %w", group, err)
	}
	return Paths{Version: V2, Unified: dir, group: group}, nil
}

func v1Paths(path cg1.Path, static string) (Paths, error) {
	subs, err := v1Hierarchy()
	if err != nil {
		return Paths{}, err
	}
	p := Paths{Version: V1, v1: path, static: static}
	for _, s := range subs {
		rel, err := path(s.Name())
		if err != nil {
			if errors.Is(err, cg1.ErrControllerNotActive) {
				continue
			}
			return Paths{}, fmt.Errorf("cgroups: %s: %w", s.Name(), err)
		}
		ps, ok := s.(pather)
		if !ok {
			continue
		}
		dir := ps.Path(rel)
		switch s.Name() {
		case cg1.Cpu:
			p.CPU = dir
		case cg1.Cpuacct:
			p.CPUAcct = dir
		case cg1.Memory:
			p.Memory = dir
		case cg1.Cpuset:
			p.CPUSet = dir
		}
	}
	if p.CPU == "" || p.Memory == "" {
		return Paths{}, errors.New("cgroups: cpu or memory hierarchy not found")
	}
	return p, nil
}

// v1Hierarchy is the library's default v1 hierarchy narrowed to the
// controllers escrad uses (a Stat then reads nothing else).
func v1Hierarchy() ([]cg1.Subsystem, error) {
	all, err := cg1.Default()
	if err != nil {
		return nil, fmt.Errorf("cgroups: v1 hierarchy: %w", err)
	}
	var out []cg1.Subsystem
	for _, s := range all {
		if slices.Contains(v1Controllers, s.Name()) {
			out = append(out, s)
		}
	}
	return out, nil
}

// File names a control file independent of the hierarchy version.
type File int

const (
	CPUQuota     File = iota // v1 cpu.cfs_quota_us; v2 cpu.max (quota and period together)
	CPUPeriod                // v1 cpu.cfs_period_us; v2 cpu.max
	CPUStatFile              // cpu.stat
	CPUAcctUsage             // v1 cpuacct.usage (ns); v2: none (usage_usec in cpu.stat)
	MemLimit                 // v1 memory.limit_in_bytes; v2 memory.max
	MemswLimit               // v1 memory.memsw.limit_in_bytes; v2: none
	MemUsage                 // v1 memory.usage_in_bytes; v2 memory.current
	MemHigh                  // v2 memory.high
	MemEvents                // v2 memory.events
	OOMControl               // v1 memory.oom_control
	CPUSetCPUs               // cpuset.cpus
	MemPeak                  // v1 memory.max_usage_in_bytes; v2 memory.peak (resettable per fd since 6.12)
	CPUBurst                 // v1 cpu.cfs_burst_us; v2 cpu.max.burst (Linux >= 5.14; must stay <= the quota)
	nFiles
)

func (g *Group) name(f File) (dir, file string) {
	if g.Paths.Version == V2 {
		d := g.Paths.Unified
		switch f {
		case CPUQuota, CPUPeriod:
			return d, "cpu.max"
		case CPUStatFile:
			return d, "cpu.stat"
		case MemLimit:
			return d, "memory.max"
		case MemUsage:
			return d, "memory.current"
		case MemHigh:
			return d, "memory.high"
		case MemEvents:
			return d, "memory.events"
		case CPUSetCPUs:
			return d, "cpuset.cpus"
		case MemPeak:
			return d, "memory.peak"
		case CPUBurst:
			return d, "cpu.max.burst"
		}
		return "", ""
	}
	p := g.Paths
	switch f {
	case CPUQuota:
		return p.CPU, "cpu.cfs_quota_us"
	case CPUPeriod:
		return p.CPU, "cpu.cfs_period_us"
	case CPUStatFile:
		return p.CPU, "cpu.stat"
	case CPUAcctUsage:
		return p.CPUAcct, "cpuacct.usage"
	case MemLimit:
		return p.Memory, "memory.limit_in_bytes"
	case MemswLimit:
		return p.Memory, "memory.memsw.limit_in_bytes"
	case MemUsage:
		return p.Memory, "memory.usage_in_bytes"
	case OOMControl:
		return p.Memory, "memory.oom_control"
	case CPUSetCPUs:
		return p.CPUSet, "cpuset.cpus"
	case MemPeak:
		return p.Memory, "memory.max_usage_in_bytes"
	case CPUBurst:
		return p.CPU, "cpu.cfs_burst_us"
	}
	return "", ""
}

// Group holds one cgroup's control files open. Its methods are safe for
// concurrent use: each call is one pread/pwrite on its own descriptor.
type Group struct {
	Paths Paths
	fds   [nFiles]int
	lib   atomic.Pointer[libWriter] // limit writes through the library (benchmark)
}

// ErrNoFile reports a control file this group does not have.
var ErrNoFile = errors.New("cgroups: control file not available")

// Open opens every control file of p that exists. The cpu and memory
// limit files are required; the others are optional (e.g. memsw needs swap
// accounting, cpuset may be unmounted).
func Open(p Paths) (*Group, error) {
	g := &Group{Paths: p}
	for i := range g.fds {
		g.fds[i] = -1
	}
	for f := File(0); f < nFiles; f++ {
		dir, name := g.name(f)
		if dir == "" {
			continue
		}
		if f == CPUPeriod && p.Version == V2 {
			continue // shares cpu.max with CPUQuota
		}
		mode := unix.O_RDONLY
		switch f {
		case CPUQuota, CPUPeriod, MemLimit, MemswLimit, MemHigh, OOMControl, CPUSetCPUs, MemPeak, CPUBurst:
			mode = unix.O_RDWR
		}
		fd, err := unix.Open(filepath.Join(dir, name), mode|unix.O_CLOEXEC, 0)
		if err != nil {
			if f == MemPeak {
				continue // optional: read-only memory.peak before 6.12
			}
			if f == CPUQuota || f == MemLimit || f == CPUStatFile || !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EACCES) {
				g.Close()
				return nil, fmt.Errorf("cgroups: open %s: %w", filepath.Join(dir, name), err)
			}
			continue
		}
		g.fds[f] = fd
	}
	if p.Version == V2 {
		g.fds[CPUPeriod] = g.fds[CPUQuota]
	}
	return g, nil
}

// Has reports whether f is open.
func (g *Group) Has(f File) bool { return g.fds[f] >= 0 }

// FD returns f's descriptor (-1 when absent), e.g. for cgroup.event_control.
func (g *Group) FD(f File) int { return g.fds[f] }

// Close closes every descriptor.
func (g *Group) Close() {
	for i, fd := range g.fds {
		if fd >= 0 && !(g.Paths.Version == V2 && File(i) == CPUPeriod) {
			unix.Close(fd)
		}
		g.fds[i] = -1
	}
}

// Read reads f from offset 0 into buf and returns the bytes read.
func (g *Group) Read(f File, buf []byte) ([]byte, error) {
	fd := g.fds[f]
	if fd < 0 {
		return nil, ErrNoFile
	}
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// ReadInt reads a one-number file ("max" is Max).
func (g *Group) ReadInt(f File) (int64, error) {
	var buf [64]byte
	b, err := g.Read(f, buf[:])
	if err != nil {
		return 0, err
	}
	return ParseInt(b)
}

// MemPeak reads the group's peak memory usage since the last
// ResetMemPeak (v1 memory.max_usage_in_bytes; v2 memory.peak through this
// Group's own descriptor, resettable since Linux 6.12). ok is false where
// the group has no resettable peak.
func (g *Group) MemPeak() (peak int64, ok bool) {
	if g.fds[MemPeak] < 0 {
		return 0, false
	}
	v, err := g.ReadInt(MemPeak)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// ResetMemPeak restarts MemPeak from the current usage (any write resets
// both files).
func (g *Group) ResetMemPeak() error { return g.Write(MemPeak, []byte("0")) }

// UsageNs reads the group's cumulative CPU time in ns: v1 cpuacct.usage,
// v2 cpu.stat usage_usec. buf holds the file (512 bytes is enough).
func (g *Group) UsageNs(buf []byte) (uint64, error) {
	if g.Paths.Version == V2 {
		b, err := g.Read(CPUStatFile, buf)
		if err != nil {
			return 0, err
		}
		us, ok := KeyedValue(b, "usage_usec")
		if !ok {
			return 0, errors.New("cgroups: cpu.stat has no usage_usec")
		}
		return us * 1000, nil
	}
	b, err := g.Read(CPUAcctUsage, buf)
	if err != nil {
		return 0, err
	}
	return ParseUint(b)
}

// Write writes b to f in one pwrite.
func (g *Group) Write(f File, b []byte) error {
	fd := g.fds[f]
	if fd < 0 {
		return ErrNoFile
	}
	// A limit write that has to reclaim, or a v1 memory.limit_in_bytes
	// write at all, checks for a pending signal and fails with EINTR: the
	// Go runtime's preemption signal (SIGURG) is one. SA_RESTART does not
	// cover it, so try again, as package os does for its files.
	var err error
	for range maxEINTR {
		if _, err = unix.Pwrite(fd, b, 0); err != unix.EINTR {
			break
		}
	}
	return err
}

// maxEINTR bounds the retries of a write a signal interrupted.
const maxEINTR = 16

// WriteInt writes n; Max is written as "max" on v2 and -1 on v1.
func (g *Group) WriteInt(f File, n int64) error {
	if w := g.lib.Load(); w != nil && (f == MemLimit || f == MemswLimit) {
		return w.setMem(f, n)
	}
	var buf [24]byte
	b := buf[:0]
	if n == Max && g.Paths.Version == V2 {
		b = append(b, "max"...)
	} else {
		b = AppendInt(b, n)
	}
	return g.Write(f, b)
}

// CPULimit reads the CFS quota and period.
func (g *Group) CPULimit() (quotaUs int64, periodUs uint64, err error) {
	if g.Paths.Version == V2 {
		var buf [64]byte
		b, err := g.Read(CPUQuota, buf[:])
		if err != nil {
			return 0, 0, err
		}
		return ParseCPUMax(b)
	}
	if quotaUs, err = g.ReadInt(CPUQuota); err != nil {
		return 0, 0, err
	}
	p, err := g.ReadInt(CPUPeriod)
	return quotaUs, uint64(p), err
}

// SetCPULimit writes quota and period (period 0: keep). On v1 the period is
// written first when shrinking it would make quota/period invalid is not a
// concern: the kernel validates each file on its own.
func (g *Group) SetCPULimit(quotaUs int64, periodUs uint32) error {
	if w := g.lib.Load(); w != nil {
		return w.setCPU(quotaUs, periodUs, func() (uint64, error) { _, p, err := g.CPULimit(); return p, err })
	}
	if g.Paths.Version == V2 {
		var buf [48]byte
		b := buf[:0]
		if quotaUs < 0 {
			b = append(b, "max"...)
		} else {
			b = AppendInt(b, quotaUs)
		}
		if periodUs != 0 {
			b = append(b, ' ')
			b = AppendInt(b, int64(periodUs))
		}
		return g.Write(CPUQuota, b)
	}
	if periodUs != 0 {
		if err := g.WriteInt(CPUPeriod, int64(periodUs)); err != nil {
			return err
		}
	}
	return g.WriteInt(CPUQuota, quotaUs)
}

// SetCPULimitBurst sets the quota with a CFS burst of burstUs beside it,
// curBurstUs being the burst in place. The kernel refuses a quota below
// the burst, so a smaller burst is written first and a larger one after
// the quota. A group without the burst file gets the quota alone.
func (g *Group) SetCPULimitBurst(quotaUs int64, periodUs uint32, burstUs, curBurstUs int64) error {
	if !g.Has(CPUBurst) {
		return g.SetCPULimit(quotaUs, periodUs)
	}
	if burstUs < curBurstUs {
		if err := g.WriteInt(CPUBurst, burstUs); err != nil {
			return fmt.Errorf("cpu burst: %w", err)
		}
	}
	if err := g.SetCPULimit(quotaUs, periodUs); err != nil {
		return err
	}
	if burstUs > curBurstUs {
		if err := g.WriteInt(CPUBurst, burstUs); err != nil {
			return fmt.Errorf("cpu burst (the quota is in place): %w", err)
		}
	}
	return nil
}
