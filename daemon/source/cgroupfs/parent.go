package cgroupfs

import (
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// parentGroup is the common parent directory of some watched groups (on a
// Docker host: /docker or the engine's --cgroup-parent). Its cumulative
// usage covers all its descendants, so when it did not move during a
// period, no member ran: one read replaces one per member. That is the
// common case for a host of mostly idle containers; when siblings are
// busy the members are read one by one as usual.
type parentGroup struct {
	dir     string
	fd      int // cpuacct.usage (v1) or cpu.stat (v2) of dir; -1: none
	v2      bool
	last    uint64
	lastAt  time.Time // when last was read (a period sample)
	quiet   bool      // idle over the last period (no member ran)
	primed  bool
	members []*sampled
	// The throttle watcher's baseline, apart from the period's (last).
	pollLast   uint64
	pollPrimed bool
}

func (c *Source) regroup(byDir map[string]*parentGroup, out []*parentGroup) []*parentGroup {
	for _, pg := range byDir {
		pg.members = pg.members[:0]
	}
	for _, s := range c.groups {
		dir := filepath.Dir(s.g.Paths.CPUAcct)
		v2 := s.g.Paths.Version == cgroups.V2
		if v2 {
			dir = filepath.Dir(s.g.Paths.Unified)
		}
		pg := byDir[dir]
		if pg == nil {
			pg = &parentGroup{dir: dir, fd: -1, v2: v2}
			name := "cpuacct.usage"
			if v2 {
				name = "cpu.stat"
			}
			if fd, err := unix.Open(filepath.Join(dir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				pg.fd = fd
			}
			byDir[dir] = pg
		}
		pg.members = append(pg.members, s)
	}
	for dir, pg := range byDir {
		if len(pg.members) == 0 {
			pg.close()
			delete(byDir, dir)
			continue
		}
		out = append(out, pg)
	}
	return out
}

func (pg *parentGroup) close() {
	if pg.fd >= 0 {
		unix.Close(pg.fd)
		pg.fd = -1
	}
}

// idle reports whether no member can have run or been throttled since the
// last period: the parent's usage did not move, every member has a
// baseline and none was throttled last period (a throttled group with
// runnable tasks runs again when its quota refills each period, so its
// usage moves).
func (pg *parentGroup) idle(buf []byte) bool {
	u, ok := pg.usage(buf)
	if !ok {
		return false
	}
	same := pg.primed && u == pg.last
	pg.last, pg.primed, pg.lastAt = u, true, time.Now()
	if !same {
		return false
	}
	for _, s := range pg.members {
		if !s.primed || s.wasThrot {
			return false
		}
	}
	return true
}

// usage reads the parent's cumulative usage; false when it cannot.
func (pg *parentGroup) usage(buf []byte) (uint64, bool) {
	if pg.fd < 0 {
		return 0, false
	}
	n, err := unix.Pread(pg.fd, buf, 0)
	if err != nil {
		return 0, false
	}
	if pg.v2 {
		var cs cgroups.CPUStat
		if cgroups.ParseCPUStat(buf[:n], &cs) != nil || !cs.HasUsage {
			return 0, false
		}
		return cs.UsageUs, true
	}
	u, err := cgroups.ParseUint(buf[:n])
	return u, err == nil
}

// movedSincePoll reports whether the parent's usage moved since the
// throttle watcher's last look (true when unknown or on the first look).
func (pg *parentGroup) movedSincePoll(buf []byte) bool {
	u, ok := pg.usage(buf)
	if !ok {
		return true
	}
	moved := !pg.pollPrimed || u != pg.pollLast
	pg.pollLast, pg.pollPrimed = u, true
	return moved
}
