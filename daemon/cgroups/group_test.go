package cgroups_test

import (
	"testing"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
)

func openTest(t testing.TB, name string) *cgroups.Group {
	return cgtest.Open(t, cgtest.New(t, name))
}

func TestGroupReadsAndWritesThroughOpenFiles(t *testing.T) {
	g := openTest(t, "group")
	if err := g.SetCPULimit(25000, 50000); err != nil {
		t.Fatal(err)
	}
	q, p, err := g.CPULimit()
	if err != nil || q != 25000 || p != 50000 {
		t.Fatalf("cpu limit %d/%d %v", q, p, err)
	}
	if err := g.SetCPULimit(cgroups.Max, 0); err != nil {
		t.Fatal(err)
	}
	if q, _, _ := g.CPULimit(); q != cgroups.Max {
		t.Fatalf("unlimited quota read back as %d", q)
	}
	if err := g.WriteInt(cgroups.MemLimit, 64<<20); err != nil {
		t.Fatal(err)
	}
	if m, err := g.ReadInt(cgroups.MemLimit); err != nil || m != 64<<20 {
		t.Fatalf("memory limit %d %v", m, err)
	}
	var st cgroups.CPUStat
	buf := make([]byte, 512)
	b, err := g.Read(cgroups.CPUStatFile, buf)
	if err != nil || cgroups.ParseCPUStat(b, &st) != nil || !st.HasThrottled {
		t.Fatalf("cpu.stat %q %v %+v", b, err, st)
	}
	if err := g.Write(cgroups.CPUQuota, []byte("bogus")); err == nil {
		t.Fatal("kernel accepted a bogus quota")
	}
}

func TestOpenMissingGroupFails(t *testing.T) {
	p, err := cgroups.PathsForCgroup("/escra-test-does-not-exist")
	if err != nil {
		t.Skip(err)
	}
	if _, err := cgroups.Open(p); err == nil {
		t.Fatal("opened a cgroup that does not exist")
	}
}

func BenchmarkReadUsageAndStat(b *testing.B) {
	g := openTest(b, "bench-read")
	buf := make([]byte, 512)
	var st cgroups.CPUStat
	b.Run("cpuacct.usage", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, _ := g.Read(cgroups.CPUAcctUsage, buf)
			_, _ = cgroups.ParseUint(r)
		}
	})
	b.Run("cpu.stat", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, _ := g.Read(cgroups.CPUStatFile, buf)
			_ = cgroups.ParseCPUStat(r, &st)
		}
	})
	b.Run("write_quota", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = g.SetCPULimit(int64(20000+i%2*1000), 0)
		}
	})
}
