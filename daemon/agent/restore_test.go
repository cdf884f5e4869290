package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// With no controller for --restore-after, a configured cgroup gets back
// the limits it had when escrad found it; a controller coming back (its
// generations starting again at 1) moves them again.
func TestRestoreAfterControllerGone(t *testing.T) {
	rel := cgtest.New(t, "agent-restore")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(24<<20))
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "50000")
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	addr := p.Addr()
	run(t, Config{Controller: addr, RestoreAfter: 400 * time.Millisecond,
		Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}}})
	reg := p.WaitRegistered("cgroup:"+rel, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	set := func(p *peer.Peer, gen uint64, quota, mem int64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: gen,
			Limits: &pb.Limits{CpuQuotaUs: quota, MemoryLimitBytes: mem}})
		if err != nil || ack.Applied[0].Error != "" {
			t.Fatalf("set-limits gen %d: %v %v", gen, err, ack)
		}
	}
	want := func(quota, mem string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			q := cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us")
			m := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes")
			if q == quota && m == mem {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("quota %s memory %s, want %s %s", q, m, quota, mem)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	set(p, 7, 20000, 64<<20)
	want("20000", strconv.Itoa(64<<20), time.Second)

	p.Close()
	took := want("50000", strconv.Itoa(24<<20), 5*time.Second)
	t.Logf("limits put back %v after the controller went away (restore-after 400ms)", took.Round(time.Millisecond))
	if took < 300*time.Millisecond {
		t.Fatalf("restored after %v: before --restore-after", took)
	}

	p2, err := peer.StartAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	if p2.WaitRegistered("cgroup:"+rel, 5*time.Second) == nil {
		t.Fatal("not registered with the new controller")
	}
	set(p2, 1, 30000, 48<<20)
	want("30000", strconv.Itoa(48<<20), time.Second)
	// Control stays with the session: nothing is restored while it is up.
	time.Sleep(800 * time.Millisecond)
	want("30000", strconv.Itoa(48<<20), 0)
}

func TestDockerLimits(t *testing.T) {
	for _, c := range []struct {
		in   containers.Limits
		want [3]int64
	}{
		{containers.Limits{}, [3]int64{-1, 100000, -1}},
		{containers.Limits{CPUQuotaUs: 150000, CPUPeriodUs: 100000, MemoryBytes: 1 << 30}, [3]int64{150000, 100000, 1 << 30}},
		{containers.Limits{NanoCPUs: 1_500_000_000}, [3]int64{150000, 100000, -1}},
	} {
		got := dockerLimits(c.in, limitsFound(100000))
		if [3]int64{got.CPUQuotaUs, int64(got.CPUPeriodUs), got.MemoryBytes} != c.want {
			t.Errorf("%+v: got %+v, want %v", c.in, got, c.want)
		}
	}
}

func limitsFound(periodUs uint32) limits.Current { return limits.Current{CPUPeriodUs: periodUs} }

// A put-back that cannot be made yet (the container uses more than
// Docker's memory limit after a grant) puts the CPU back, keeps the
// larger memory limit, and is tried again: once usage falls below
// Docker's limit, that limit is back without a controller.
func TestRestoreRetriedUntilUsageFits(t *testing.T) {
	rel := cgtest.New(t, "agent-restore-retry")
	cgtest.Write(t, "memory", rel, "memory.limit_in_bytes", strconv.Itoa(24<<20))
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", "50000")
	shm, err := os.MkdirTemp("/dev/shm", "escra-restore-")
	if err != nil {
		t.Skip("no /dev/shm tmpfs:", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	run(t, Config{Controller: p.Addr(), RestoreAfter: 300 * time.Millisecond,
		Cgroups: []containers.CgroupSpec{{Name: "vm1", App: "vms", Path: rel}}})
	reg := p.WaitRegistered("cgroup:"+rel, 5*time.Second)
	if reg == nil {
		t.Fatal("not registered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := p.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Generation: 3,
		Limits: &pb.Limits{CpuQuotaUs: 20000, MemoryLimitBytes: 64 << 20}})
	if err != nil || ack.Applied[0].Error != "" {
		t.Fatalf("set-limits: %v %v", err, ack)
	}
	// 32 MiB of tmpfs pages, charged to the group (its writer ran there).
	file := filepath.Join(shm, "fill")
	w, err := cgtest.Start(rel, "/bin/sh", "-c", "head -c 33554432 /dev/zero > "+file)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.Wait(10 * time.Second); err != nil || st.ExitStatus() != 0 {
		t.Fatalf("filling tmpfs in the group: %v %v", st, err)
	}
	if u, _ := strconv.ParseInt(cgtest.Read(t, "memory", rel, "memory.usage_in_bytes"), 10, 64); u <= 24<<20 {
		t.Fatalf("usage %d: the fill was not charged to the group, the test proves nothing", u)
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: quota %s memory %s", what, cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us"),
					cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"))
			}
		}
	}
	p.Close()
	wait("CPU put back while memory cannot be", func() bool {
		return cgtest.Read(t, "cpu", rel, "cpu.cfs_quota_us") == "50000"
	})
	time.Sleep(time.Second) // several more ticks: memory stays where usage needs it
	if m := cgtest.Read(t, "memory", rel, "memory.limit_in_bytes"); m != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit %s while usage is above Docker's 24 MiB, want the controller's 64 MiB kept", m)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	wait("memory put back once usage fits", func() bool {
		return cgtest.Read(t, "memory", rel, "memory.limit_in_bytes") == strconv.Itoa(24<<20)
	})
}
