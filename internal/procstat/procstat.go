// Package procstat reads /proc/PID/stat (and each CPU's line of
// /proc/stat), the one place the repository does. It is a thin layer over
// github.com/prometheus/procfs, whose parser takes the command name up to
// the last ')', so a name with spaces or parentheses cannot shift the
// fields after it.
package procstat

import (
	"errors"
	iofs "io/fs"
	"time"

	"github.com/prometheus/procfs"
)

// UserHZ is the clock tick of /proc/PID/stat's times (USER_HZ: 100 on
// every Linux architecture the project runs on).
const UserHZ = 100

// Stat is the part of /proc/PID/stat the project reads.
type Stat struct {
	Comm         string
	State        byte // R, S, D, T (stopped), t (traced), Z (zombie), ...
	PPID         int
	NumThreads   int
	UTime, STime uint64 // this process's user and system time, in ticks
	// CUTime and CSTime are the user and system time of its waited-for
	// children, in ticks.
	CUTime, CSTime uint64
	StartTime      uint64 // ticks after boot: with the PID, names one process
}

// Read reads pid's stat under /proc.
func Read(pid int) (Stat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return Stat{}, err
	}
	return readIn(fs, pid)
}

func readIn(fs procfs.FS, pid int) (Stat, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return Stat{}, err
	}
	return read(p)
}

// Threads reads the stat of every thread of pid
// (/proc/PID/task/TID/stat); a thread that exits meanwhile is left out.
func Threads(pid int) ([]Stat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	return threads(fs, pid)
}

func threads(fs procfs.FS, pid int) ([]Stat, error) {
	ts, err := fs.AllThreads(pid)
	if err != nil {
		return nil, err
	}
	var out []Stat
	for _, t := range ts {
		s, err := read(t)
		if errors.Is(err, iofs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func read(p procfs.Proc) (Stat, error) {
	st, err := p.Stat()
	if err != nil {
		return Stat{}, err
	}
	s := Stat{Comm: st.Comm, PPID: st.PPID, NumThreads: st.NumThreads,
		UTime: uint64(st.UTime), STime: uint64(st.STime),
		CUTime: uint64(st.CUTime), CSTime: uint64(st.CSTime), StartTime: st.Starttime}
	if st.State != "" {
		s.State = st.State[0]
	}
	return s, nil
}

// CPUTicks is the process's own user+system time, in ticks.
func (s Stat) CPUTicks() uint64 { return s.UTime + s.STime }

// CPU is the process's own user+system time.
func (s Stat) CPU() time.Duration { return ticks(s.CPUTicks()) }

// ChildrenCPU is the user+system time of its waited-for children.
func (s Stat) ChildrenCPU() time.Duration { return ticks(s.CUTime + s.CSTime) }

// Stopped reports a process stopped by a signal (T) or by a tracer (t).
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Zombie reports a process that exited and was not reaped yet.
func (s Stat) Zombie() bool { return s.State == 'Z' }

func ticks(n uint64) time.Duration { return time.Duration(n) * (time.Second / UserHZ) }
