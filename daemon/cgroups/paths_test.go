package cgroups_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
)

// The library's path lookup finds a process's real directories: a
// process moved into a fresh group resolves, by pid and by relative
// path alike, to the directories holding that group's control files.
func TestPathsForPIDAndCgroupAgree(t *testing.T) {
	rel := cgtest.New(t, "paths")
	p, err := cgroups.PathsForCgroup(rel)
	if err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"cpu": p.CPU, "cpuacct": p.CPUAcct, "memory": p.Memory} {
		if filepath.Base(dir) != filepath.Base(rel) {
			t.Errorf("%s dir %q is not the group %s", name, dir, rel)
		}
	}
	if _, err := os.Stat(filepath.Join(p.Memory, "memory.limit_in_bytes")); err != nil {
		t.Fatal(err)
	}
	proc, err := cgtest.Start(rel, cgtest.Workload(t, "memhog"), "-mib", "1", "-hold", "30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	q, err := cgroups.PathsForPID(proc.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if q.CPU != p.CPU || q.CPUAcct != p.CPUAcct || q.Memory != p.Memory || q.CPUSet != p.CPUSet {
		t.Fatalf("by pid %+v, by path %+v", q, p)
	}
	if _, err := cgroups.PathsForPID(1 << 30); err == nil {
		t.Fatal("a pid that does not exist resolved")
	}
}

// Stats through the library move as the kernel's counters do: a spinning
// process under a small quota shows CPU time, throttled periods and
// throttled time; a limit and an allocation show in bytes.
func TestStatsThroughLibrary(t *testing.T) {
	rel := cgtest.New(t, "stats")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_period_us", "10000")
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "2000")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", "268435456")
	p, err := cgroups.PathsForCgroup(rel)
	if err != nil {
		t.Fatal(err)
	}
	before, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if before.MemoryLimit != 256<<20 || before.CPUUsage != 0 {
		t.Fatalf("fresh group: %+v", before)
	}
	spin, err := cgtest.Start(rel, cgtest.Workload(t, "spin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spin.Kill)
	var after cgroups.Stats
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if after, err = p.Stats(); err != nil {
			t.Fatal(err)
		}
		if after.ThrottledPeriods > 3 && after.CPUThrottled > 0 && after.CPUUsage > 0 && after.MemoryUsage > 0 {
			break
		}
	}
	if after.ThrottledPeriods <= 3 || after.CPUThrottled <= 0 || after.CPUUsage <= 0 || after.Periods < after.ThrottledPeriods || after.MemoryUsage == 0 {
		t.Fatalf("a throttled spinner: %+v", after)
	}
	if _, err := (cgroups.Paths{Version: cgroups.V1}).Stats(); err == nil {
		t.Fatal("hand-made Paths read stats")
	}
}

// The library write path (the benchmark's comparison) writes the same
// limits the descriptors read back; off again, the descriptors write.
func TestLibraryWritePath(t *testing.T) {
	g := cgtest.Open(t, cgtest.New(t, "libwrite"))
	if err := g.LibraryWrites(true); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCPULimit(30000, 60000); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteInt(cgroups.MemLimit, 48<<20); err != nil {
		t.Fatal(err)
	}
	if q, per, err := g.CPULimit(); err != nil || q != 30000 || per != 60000 {
		t.Fatalf("after a library write: %d/%d %v", q, per, err)
	}
	if m, err := g.ReadInt(cgroups.MemLimit); err != nil || m != 48<<20 {
		t.Fatalf("memory after a library write: %d %v", m, err)
	}
	if err := g.SetCPULimit(500, 0); err == nil { // below the kernel's 1 ms minimum
		t.Fatal("the library path accepted a bad quota")
	}
	if err := g.LibraryWrites(false); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCPULimit(20000, 0); err != nil {
		t.Fatal(err)
	}
	if q, per, _ := g.CPULimit(); q != 20000 || per != 60000 {
		t.Fatalf("direct write after the library: %d/%d", q, per)
	}
	var hand cgroups.Group
	if err := hand.LibraryWrites(true); err == nil {
		t.Fatal("a group without a library path switched to it")
	}
}
