package cgroups

import (
	"errors"
	"fmt"

	cg1 "github.com/containerd/cgroups/v3/cgroup1"
	cg2 "github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// libWriter writes limits through containerd/cgroups/v3's Update: open,
// write, close of each file by path (v1 also stats the directory). The
// daemon's own path is one pwrite on a descriptor held open. make
// bench-daemon times both in one run (apply_latency_*_us and
// apply_latency_*_us_cgroups_lib); the library loses there, so escrad
// writes limits itself and uses the library for everything else.
type libWriter struct {
	v1 cg1.Cgroup
	v2 *cg2.Manager
}

// LibraryWrites switches g's limit writes (SetCPULimit, WriteInt of
// MemLimit and MemswLimit) to the library (on) or back to the held
// descriptors (off). For the benchmark; call it between writes.
func (g *Group) LibraryWrites(on bool) error {
	if !on {
		g.lib.Store(nil)
		return nil
	}
	w := &libWriter{}
	var err error
	switch {
	case g.Paths.Version == V2 && g.Paths.group != "":
		w.v2, err = cg2.Load(g.Paths.group, cg2.WithMountpoint(unifiedMount))
	case g.Paths.Version == V1 && g.Paths.v1 != nil:
		w.v1, err = g.Paths.libV1(cg1.Cpu, cg1.Memory)
	default:
		err = ErrNoLibraryPath
	}
	if err != nil {
		return err
	}
	g.lib.Store(w)
	return nil
}

func (w *libWriter) setCPU(quotaUs int64, periodUs uint32, curPeriod func() (uint64, error)) error {
	if w.v2 != nil {
		// cpu.max takes quota and period together; the library writes its
		// default period when none is given, so keep the current one.
		p := uint64(periodUs)
		if p == 0 {
			var err error
			if p, err = curPeriod(); err != nil {
				return err
			}
		}
		var q *int64
		if quotaUs >= 0 {
			q = &quotaUs
		}
		return w.v2.Update(&cg2.Resources{CPU: &cg2.CPU{Max: cg2.NewCPUMax(q, &p)}})
	}
	cpu := &specs.LinuxCPU{Quota: &quotaUs}
	if periodUs != 0 {
		p := uint64(periodUs)
		cpu.Period = &p
	}
	return w.v1.Update(&specs.LinuxResources{CPU: cpu})
}

func (w *libWriter) setMem(f File, n int64) error {
	if w.v2 != nil {
		if f != MemLimit {
			return ErrNoFile
		}
		if n == Max {
			return errors.New("cgroups: library path: no unlimited memory.max")
		}
		return w.v2.Update(&cg2.Resources{Memory: &cg2.Memory{Max: &n}})
	}
	m := &specs.LinuxMemory{}
	switch f {
	case MemLimit:
		m.Limit = &n
	case MemswLimit:
		m.Swap = &n
	default:
		return fmt.Errorf("cgroups: library path: file %d", f)
	}
	return w.v1.Update(&specs.LinuxResources{Memory: m})
}
