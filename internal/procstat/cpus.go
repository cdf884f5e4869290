package procstat

import "github.com/prometheus/procfs"

// CPU is one CPU's time since boot from /proc/stat, in seconds.
type CPU struct {
	Busy float64 // user, nice, system, irq, softirq, steal
	Idle float64 // idle, iowait
}

// CPUs reads every CPU's time from /proc/stat, by CPU number.
func CPUs() (map[int]CPU, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	return cpusIn(fs)
}

func cpusIn(fs procfs.FS) (map[int]CPU, error) {
	st, err := fs.Stat()
	if err != nil {
		return nil, err
	}
	m := make(map[int]CPU, len(st.CPU))
	for c, t := range st.CPU {
		m[int(c)] = CPU{Busy: t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ + t.Steal, Idle: t.Idle + t.Iowait}
	}
	return m, nil
}
