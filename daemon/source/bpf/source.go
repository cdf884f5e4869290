// Package bpf is escrad's bpf backend: per-period CFS telemetry (Escra
// §IV-B) on stock kernels with BTF, from a CO-RE program (c/cfs.bpf.c) on
// the CFS bandwidth timers' expiry, delivered through a ring buffer, and
// throttle events from context switches. It produces the same record as
// the escra.ko backend (source.Record, numbered by source.SeqState) and
// traps OOMs the stock-kernel way with source/cgroupfs's Watcher, since a
// BPF program cannot make a charge wait (so its events carry no Pages).
package bpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/rescue"
	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/cgroupfs"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// BTFPath is where the running kernel exposes its BTF.
const BTFPath = "/sys/kernel/btf/vmlinux"

// btfPath is BTFPath; tests point it elsewhere.
var btfPath = BTFPath

// ErrNoBTF: the kernel has no BTF, so CO-RE cannot relocate the program.
var ErrNoBTF = errors.New("bpf backend: kernel has no BTF (" + BTFPath + " missing; needs CONFIG_DEBUG_INFO_BTF)")

// ErrNotPermitted: this process may not load tracing programs.
var ErrNotPermitted = errors.New("bpf backend: not permitted (needs root, or CAP_BPF, CAP_PERFMON and CAP_SYSLOG)")

// privileged: the effective capabilities allow loading a tracing program
// (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN before 5.8) and reading
// kernel addresses (CAP_SYSLOG). Unknown: let the kernel decide.
func privileged() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return true
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(uint(c)%32)) != 0 }
	return has(unix.CAP_SYSLOG) && (has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF) && has(unix.CAP_PERFMON))
}

// DrainEvery is how often the reader drains the ring buffer while groups
// are watched: period records reach the controller at most this late
// (escra.ko sends each at once; throttle events wake the reader at once).
// A tenth of the default period, like the cgroupfs throttle watcher's
// poll: one wake-up for many groups' records (docs/kernel-bpf.md).
const DrainEvery = 10 * time.Millisecond

// unknownGridDrain is how often a group with no record yet is looked
// for: the default period.
const unknownGridDrain = 100 * time.Millisecond

// drainMargin is how long after a group's CFS period boundary the reader
// wakes for its record: the timer's own slack plus the program's run.
const drainMargin = time.Millisecond

// Source is the bpf backend (source.Source and source.LimitFollower).
type Source struct {
	objs  cfsObjects
	links []link.Link
	rd    *ringbuf.Reader
	oom   *cgroupfs.Watcher
	log   *slog.Logger

	// noThrottleEvents: throttle records are dropped (escrad
	// --throttle-poll 0 turns throttle events off for every backend).
	noThrottleEvents atomic.Bool

	mu   sync.Mutex
	byID map[uint64]*watched // cgroup id in the cpu controller's hierarchy
	byH  map[uint32]uint64
	buf  [512]byte // usage reads, under mu

	groups []*watched // scratch for nextDrain, under mu
}

// monoNs is CLOCK_MONOTONIC, the clock of the records' timestamps.
func monoNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

type watched struct {
	h     uint32
	seq   source.SeqState
	probe source.UsageProbe
	// The CFS period grid of the group (from its last period record),
	// where its next record will come: the timer keeps its phase while
	// the group idles (hrtimer_forward_now). periodNs 0: no record yet.
	lastNs, periodNs int64
}

// nextDrain is how long the reader may sleep at monotonic time now: until
// just after the earliest next CFS period boundary of the watched groups
// (their records are due then), but not less than DrainEvery after the
// previous drain at last, so many groups of different phases still cost
// at most one wake-up per DrainEvery; a record late at its boundary is
// looked for again DrainEvery later; a second when none is watched.
// One group then costs a wake-up per period instead of ten, and its
// record waits ~1 ms instead of up to DrainEvery. Idle groups (timer
// stopped) are looked at together, at most once per period after the
// last drain: each at its own boundary, a hundred idle groups of a
// hundred phases woke the reader every DrainEvery for records that do not
// come. A group waking from idle sends its throttle and near records at
// once (forced wake-ups); its first period record waits at most a period.
// A group that has sent no record yet (its grid unknown: new, or idle
// since it was watched) is looked at like an idle one, once a period.
func nextDrain(groups []*watched, now, last int64) time.Duration {
	if len(groups) == 0 {
		return time.Second
	}
	due := int64(math.MaxInt64)
	for _, w := range groups {
		if w.periodNs <= 0 {
			due = min(due, last+int64(unknownGridDrain))
			continue
		}
		next := w.lastNs + w.periodNs
		if next+int64(DrainEvery) < now {
			// No record at the boundary nor DrainEvery later: the group
			// idles; its next boundary, and not before a period has
			// passed since the last drain.
			next += (now - next + w.periodNs - 1) / w.periodNs * w.periodNs
			next = max(next, last+w.periodNs)
		}
		due = min(due, next)
	}
	at := max(due+int64(drainMargin), last+int64(DrainEvery))
	return time.Duration(min(max(at-now, 0), int64(time.Second)))
}

// NewSource loads and attaches the program. Errors say why in one line
// (object not built, no BTF, not privileged, probe not attachable), so
// --backend auto can log them and fall back to cgroupfs.
func NewSource(period time.Duration, log *slog.Logger) (source.Source, error) {
	s, err := New(log)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New is NewSource with the concrete type (benchmarks read Stats).
func New(log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.Default()
	}
	if !Built() {
		return nil, ErrNotBuilt
	}
	if _, err := os.Stat(btfPath); err != nil {
		return nil, ErrNoBTF
	}
	if !privileged() {
		return nil, ErrNotPermitted
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones
	// to the memory cgroup, where this is a no-op.
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK. Raised here,
	// not with cilium/ebpf's rlimit package: its init() probes with bpf(2)
	// in every escrad process, which a seccomp filter without bpf kills.
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}); err != nil {
		log.Debug("bpf backend: memlock rlimit not raised", "err", err)
	}
	s := &Source{log: log, byID: map[uint64]*watched{}, byH: map[uint32]uint64{}}
	syms, err := kallsyms("sched_cfs_period_timer", "sched_cfs_slack_timer")
	if err != nil {
		return nil, err
	}
	spec, err := loadCfs()
	if err != nil {
		return nil, fmt.Errorf("bpf backend: %w", err)
	}
	for name, sym := range map[string]string{"period_timer_fn": "sched_cfs_period_timer", "slack_timer_fn": "sched_cfs_slack_timer"} {
		v := spec.Variables[name]
		if v == nil {
			return nil, fmt.Errorf("bpf backend: object has no %s", name)
		}
		if err := v.Set(syms[sym]); err != nil {
			return nil, fmt.Errorf("bpf backend: %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, loadError(err)
	}
	for _, p := range []*ebpf.Program{s.objs.EscraTimerEntry, s.objs.EscraTimerExit, s.objs.EscraSwitch} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("bpf backend: attach %s: %w", p, err)
		}
		s.links = append(s.links, l)
	}
	if err := s.SetThrottleNear(DefaultThrottleNear); err != nil {
		s.close()
		return nil, err
	}
	if s.rd, err = ringbuf.NewReader(s.objs.Records); err != nil {
		s.close()
		return nil, fmt.Errorf("bpf backend: ring buffer: %w", err)
	}
	if s.oom, err = cgroupfs.NewWatcher(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func loadError(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrNotPermitted, err)
	case errors.As(err, &ve):
		return fmt.Errorf("bpf backend: the kernel's verifier rejected the program: %v", ve)
	}
	return fmt.Errorf("bpf backend: load: %w", err)
}

func (s *Source) close() {
	for _, l := range s.links {
		l.Close()
	}
	s.links = nil
	if s.rd != nil {
		s.rd.Close()
	}
	s.objs.Close()
}

// SetThrottleEvents turns the throttle events (CpuStat.mid_period) on or
// off; on by default.
func (s *Source) SetThrottleEvents(on bool) { s.noThrottleEvents.Store(!on) }

// DefaultThrottleNear is the near-record threshold a new Source starts
// with: the cgroupfs backend's --throttle-near default.
const DefaultThrottleNear = 0.95

// SetThrottleNear sets the share of its quota a watched group may use
// within a CFS period before a near record is sent (0: no near records,
// throttle records only). The program reads it at every context switch.
func (s *Source) SetThrottleNear(share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("bpf backend: throttle-near %v: want 0..1", share)
	}
	return s.objs.NearPermille.Set(uint32(math.Round(share * 1000)))
}

// Backend implements source.Source.
func (s *Source) Backend() pb.Backend { return pb.Backend_BACKEND_BPF }

// GroupID is the id the program sees for g: the inode of its directory
// in the cpu controller's hierarchy (v1 cpu, or the unified one).
func GroupID(g *cgroups.Group) (uint64, error) {
	dir := g.Paths.CPU
	if g.Paths.Version == cgroups.V2 {
		dir = g.Paths.Unified
	}
	if dir == "" {
		return 0, errors.New("bpf backend: group has no cpu controller directory")
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("bpf backend: cgroup id of %s: %w", dir, err)
	}
	return st.Ino, nil
}

// Watch implements source.Source. As with cgroupfs, a group whose OOM
// trap cannot be set up still gets telemetry (the error is for the log).
func (s *Source) Watch(h uint32, g *cgroups.Group) error {
	id, err := GroupID(g)
	if err != nil {
		return err
	}
	if err := s.objs.Watched.Update(id, cfsEscraGroup{}, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf backend: watch: %w", err)
	}
	s.mu.Lock()
	if old, ok := s.byH[h]; ok && old != id {
		delete(s.byID, old)
	}
	s.byID[id] = &watched{h: h, probe: source.UsageProbe{G: g}}
	s.byH[h] = id
	s.mu.Unlock()
	return s.oom.Add(h, g)
}

// Unwatch implements source.Source.
func (s *Source) Unwatch(h uint32) {
	s.oom.Remove(h)
	s.mu.Lock()
	id, ok := s.byH[h]
	delete(s.byH, h)
	if ok {
		delete(s.byID, id)
	}
	s.mu.Unlock()
	if ok {
		_ = s.objs.Watched.Delete(id)
	}
}

// Resolve implements source.Source (the stock-kernel OOM trap).
func (s *Source) Resolve(ev rescue.Event, granted bool, newLimit int64) error {
	if granted {
		return s.oom.Granted(ev.Handle, newLimit)
	}
	return s.oom.Release(ev.Handle)
}

// MemoryLimitChanged implements source.LimitFollower.
func (s *Source) MemoryLimitChanged(h uint32, limit int64) {
	if err := s.oom.Follow(h, limit); err != nil {
		s.log.Warn("memory.high not moved with memory.max", "handle", h, "err", err)
	}
}

// Maintain implements source.LimitFollower.
func (s *Source) Maintain(h uint32) { s.oom.Maintain(h) }

// Stats are the program's counters.
type Stats struct {
	Periods, Throttles, Nears, Dropped uint64
	// RunNs and Runs are the programs' run time and run count while BPF
	// statistics are enabled (ebpf.EnableStats), else zero; SwitchNs is
	// the sched_switch program's share.
	RunNs, Runs, SwitchNs uint64
}

// Stats reads the program's counters.
func (s *Source) Stats() (Stats, error) {
	var st cfsEscraStats
	if err := s.objs.Stats.Lookup(uint32(0), &st); err != nil {
		return Stats{}, err
	}
	out := Stats{Periods: st.Periods, Throttles: st.Throttles, Nears: st.Nears, Dropped: st.Dropped}
	for _, p := range []*ebpf.Program{s.objs.EscraTimerEntry, s.objs.EscraTimerExit, s.objs.EscraSwitch} {
		ps, err := p.Stats()
		if err != nil {
			continue
		}
		out.RunNs += uint64(ps.Runtime)
		out.Runs += ps.RunCount
		if p == s.objs.EscraSwitch {
			out.SwitchNs = uint64(ps.Runtime)
		}
	}
	return out, nil
}

// Record layout (struct escra_rec in cfs.bpf.c; layout_test.go checks).
const (
	recSize        = 56
	offCgroupID    = 0
	offTs          = 8
	offQuota       = 16
	offPeriod      = 24
	offUnused      = 32
	offThrottledNs = 40
	offNrThrottled = 48
	offThrottled   = 52
	offKind        = 53

	kindPeriod   = 0
	kindThrottle = 1
	kindNear     = 2
)

// decode parses one ring buffer record; false when it is too short.
func decode(b []byte) (r source.Record, kind uint8, ok bool) {
	if len(b) < recSize {
		return r, 0, false
	}
	le := binary.LittleEndian
	r = source.Record{
		CgroupID:    le.Uint64(b[offCgroupID:]),
		TimestampNs: le.Uint64(b[offTs:]),
		QuotaNs:     le.Uint64(b[offQuota:]),
		PeriodNs:    le.Uint64(b[offPeriod:]),
		UnusedNs:    le.Uint64(b[offUnused:]),
		ThrottledNs: le.Uint64(b[offThrottledNs:]),
		NrThrottled: le.Uint32(b[offNrThrottled:]),
		Throttled:   b[offThrottled] != 0,
	}
	return r, b[offKind], true
}

// Run implements source.Source: records go to the sink from this
// goroutine, a Flush after each batch the ring buffer held; OOM events
// from the watcher's goroutine.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.oom.Run(sink.OOM); err != nil {
			s.log.Error("oom watcher stopped", "err", err)
		}
	}()
	defer func() {
		s.oom.RestoreAll()
		s.oom.Close()
		<-done
		s.close()
	}()
	stop := context.AfterFunc(ctx, func() { s.rd.Close() })
	defer stop()
	var rec ringbuf.Record
	var st pb.CpuStat
	pending := false
	empty := true // the ring was drained: set the next deadline
	var lastDrain int64
	for {
		// The program does not wake us per record (see WAKE_BYTES in
		// cfs.bpf.c): the deadline drains the ring after the watched
		// groups' period boundaries (nextDrain). It is set only when the
		// ring is empty and the next read may wait, not once per record.
		if empty {
			now := monoNs()
			s.mu.Lock()
			s.groups = s.groups[:0]
			for _, w := range s.byID {
				s.groups = append(s.groups, w)
			}
			sleep := nextDrain(s.groups, now, lastDrain)
			s.mu.Unlock()
			s.rd.SetDeadline(time.Now().Add(sleep))
		}
		err := s.rd.ReadInto(&rec)
		empty = err != nil || rec.Remaining == 0
		switch {
		case err == nil:
			if s.deliver(rec.RawSample, &st, sink) {
				pending = true
			}
			if pending && rec.Remaining == 0 {
				sink.Flush()
				pending = false
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			lastDrain = monoNs()
			if pending {
				sink.Flush()
				pending = false
			}
		case errors.Is(err, ringbuf.ErrClosed) || ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("bpf backend: read: %w", err)
		}
	}
}

// deliver hands one record to the sink; false when it was not for a
// watched group (unwatched since the program saw it) or malformed.
func (s *Source) deliver(b []byte, st *pb.CpuStat, sink source.Sink) bool {
	r, kind, ok := decode(b)
	if !ok || (kind == kindThrottle || kind == kindNear) && s.noThrottleEvents.Load() {
		return false
	}
	s.mu.Lock()
	w, ok := s.byID[r.CgroupID]
	if ok {
		switch kind {
		case kindPeriod:
			w.lastNs, w.periodNs = int64(r.TimestampNs), int64(r.PeriodNs)
			w.probe.Measure(&r, s.buf[:])
			w.seq.Fill(st, r)
			st.Handle = w.h
		case kindThrottle, kindNear:
			// A near record is the cgroupfs watcher's --throttle-near event.
			w.seq.FillEvent(st, w.h, r)
		default:
			ok = false
		}
	}
	s.mu.Unlock()
	// The sink runs unlocked: it may call back (Unwatch).
	if ok {
		sink.CPU(st)
	}
	return ok
}

// kallsyms finds the addresses of text symbols in /proc/kallsyms (zero
// when kptr_restrict hides them from this process: an error).
func kallsyms(names ...string) (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("bpf backend: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]uint64{}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		f := bytes.Fields(line)
		if len(f) < 3 || (f[1][0] != 't' && f[1][0] != 'T') || !want[string(f[2])] {
			continue
		}
		addr, err := strconv.ParseUint(string(f[0]), 16, 64)
		if err != nil || addr == 0 {
			return nil, fmt.Errorf("bpf backend: /proc/kallsyms hides %s's address (kernel.kptr_restrict; needs CAP_SYSLOG)", f[2])
		}
		out[string(f[2])] = addr
	}
	for _, n := range names {
		if out[n] == 0 {
			return nil, fmt.Errorf("bpf backend: %s not in /proc/kallsyms (kernel without CFS bandwidth control?)", n)
		}
	}
	return out, nil
}
