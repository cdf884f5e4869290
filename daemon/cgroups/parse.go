// Package cgroups finds a container's cgroup directories (v1 and v2,
// cgroupfs and systemd drivers) and reads and writes its control files
// through descriptors opened once: the telemetry path reads them ten times a
// second per container and the limit path writes them within microseconds.
package cgroups

import (
	"bytes"
	"errors"
	"strconv"
)

// Max is the value a limit file holds when it is unlimited ("max" on v2,
// a huge number or -1 on v1), as an int64.
const Max int64 = -1

var errSyntax = errors.New("cgroups: malformed file")

// ParseInt parses one decimal number (optionally negative) or "max",
// ignoring surrounding whitespace. v1 limits beyond 2^62 count as Max.
func ParseInt(b []byte) (int64, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return Max, nil
	}
	if len(b) == 0 || len(b) > 24 {
		return 0, errSyntax
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, err := parseUint(b)
	if err != nil {
		return 0, err
	}
	if neg {
		if u != 1 {
			return 0, errSyntax
		}
		return Max, nil
	}
	if u >= 1<<62 { // v1 "unlimited" is PAGE_COUNTER_MAX*PAGE_SIZE, about 2^63
		return Max, nil
	}
	return int64(u), nil
}

// ParseUint parses one unsigned decimal number surrounded by whitespace.
func ParseUint(b []byte) (uint64, error) { return parseUint(bytes.TrimSpace(b)) }

func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, errSyntax
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errSyntax
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, errSyntax
		}
		n = n*10 + d
	}
	return n, nil
}

// CPUStat is what telemetry needs from cpu.stat (v1 and v2 differ in names
// and units; both are normalised to microseconds here).
type CPUStat struct {
	NrPeriods    uint64
	NrThrottled  uint64
	ThrottledUs  uint64
	UsageUs      uint64 // v2 only (v1 usage is in cpuacct.usage)
	HasUsage     bool
	HasThrottled bool
}

// ParseCPUStat parses a v1 or v2 cpu.stat ("key value" lines). Unknown keys
// are skipped so newer kernels keep working; a malformed line is an error.
func ParseCPUStat(b []byte, st *CPUStat) error {
	*st = CPUStat{}
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 {
			return errSyntax
		}
		key, val := line[:sp], line[sp+1:]
		switch string(key) {
		case "nr_periods", "nr_throttled", "throttled_time", "throttled_usec", "usage_usec":
		default:
			continue
		}
		v, err := parseUint(val)
		if err != nil {
			return err
		}
		switch string(key) {
		case "nr_periods":
			st.NrPeriods = v
		case "nr_throttled":
			st.NrThrottled = v
			st.HasThrottled = true
		case "throttled_time": // v1: nanoseconds
			st.ThrottledUs = v / 1000
		case "throttled_usec":
			st.ThrottledUs = v
		case "usage_usec":
			st.UsageUs = v
			st.HasUsage = true
		}
	}
	return nil
}

// ParseCPUMax parses v2 cpu.max: "QUOTA PERIOD" where QUOTA may be "max".
func ParseCPUMax(b []byte) (quotaUs int64, periodUs uint64, err error) {
	b = bytes.TrimSpace(b)
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 {
		return 0, 0, errSyntax
	}
	if quotaUs, err = ParseInt(b[:sp]); err != nil {
		return 0, 0, err
	}
	periodUs, err = parseUint(b[sp+1:])
	return quotaUs, periodUs, err
}

// KeyedValue returns the value of key in a "key value" file such as
// memory.oom_control or memory.events; ok is false when absent or malformed.
func KeyedValue(b []byte, key string) (v uint64, ok bool) {
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || string(line[:sp]) != key {
			continue
		}
		v, err := parseUint(line[sp+1:])
		return v, err == nil
	}
	return 0, false
}

// AppendInt appends n in decimal ("max" for Max on v2 files is the
// caller's choice; see Group).
func AppendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }
