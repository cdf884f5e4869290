package agent

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/cgroups/cgtest"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/daemon/limits"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The allocator on real cgroups (no Docker): a wysiwyg group gets its
// cores, the shared group loses them, a raise that cannot be WYSIWYG is
// capped with an error naming it, and the view file follows the cpuset.
func TestCPUMgrOnRealCgroups(t *testing.T) {
	if hostCPUs() < 2 {
		t.Skip("needs 2 CPUs")
	}
	app := limits.New()
	views := t.TempDir()
	m, err := newCPUMgr(CPUPlacementHard, hostCPUs(), app, views, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	gs := openEntry(t, app, 1, "wys-shared", "50000")
	gw := openEntry(t, app, 2, "wys-c1", "100000")
	if _, err := PrepareView(views, "wys-c1", 1); err != nil {
		t.Fatal(err)
	}
	e1, _ := app.Get(1).Current()
	m.add(1, containers.Container{Name: "wys-shared"}, e1)
	e2, _ := app.Get(2).Current()
	m.add(2, containers.Container{Name: "wys-c1", CPU: containers.CPUWysiwyg}, e2)
	n := hostCPUs()
	top := wysiwyg.NewCPUSet(n - 1).String()
	if got := cpus(gw); got != top {
		t.Fatalf("C1 cpuset %q, want the top core %s", got, top)
	}
	if got := cpus(gs); strings.Contains(got, top) && n == 2 {
		t.Fatalf("shared cpuset %q still holds the P1 core", got)
	}
	if b, _ := os.ReadFile(filepath.Join(views, "wys-c1", "online")); strings.TrimSpace(string(b)) != top {
		t.Fatalf("view %q, want %s", b, top)
	}
	// All the host's cores: the shared pool must keep one; refused and
	// capped at the layout (1 core).
	apply := func(l *pb.Limits) error { return app.Apply(2, 0, l) }
	err = m.setQuota(&pb.LimitUpdate{Handle: 2, Limits: &pb.Limits{CpuQuotaUs: int64(n) * 100000}}, 100000, apply)
	if err == nil || !strings.Contains(err.Error(), "WYSIWYG") {
		t.Fatalf("raise to every core: %v", err)
	}
	if q, _, _ := gw.CPULimit(); q != 100000 {
		t.Fatalf("quota %d after the refused raise, want the 1-core cap", q)
	}
	// The C1 group goes: the shared group gets every core back.
	m.remove(2)
	if got := cpus(gs); got != wysiwyg.Range(n).String() {
		t.Fatalf("shared cpuset %q after the C1 left", got)
	}
}

// escra.cpu=auto on real cgroups: the container whose image escractl
// profile recorded as processor-sensitive gets an exclusive core (C1);
// one whose image was never profiled stays in the shared pool (C2).
func TestCPUMgrAutoOnRealCgroups(t *testing.T) {
	if hostCPUs() < 2 {
		t.Skip("needs 2 CPUs")
	}
	app := limits.New()
	m, err := newCPUMgr(CPUPlacementHard, hostCPUs(), app, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m.profiles = t.TempDir()
	const sensitive = "sha256:aa00000000000000000000000000000000000000000000000000000000000001"
	const unprofiled = "sha256:bb00000000000000000000000000000000000000000000000000000000000002"
	if err := wysiwyg.RecordProfile(m.profiles, sensitive, wysiwyg.VerdictWysiwyg); err != nil {
		t.Fatal(err)
	}
	groups := map[uint32]*cgroups.Group{1: openEntry(t, app, 1, "wys-auto-c1", "100000"), 2: openEntry(t, app, 2, "wys-auto-c2", "100000")}
	cur1, _ := app.Get(1).Current()
	m.add(1, containers.Container{Name: "wys-auto-c1", CPU: containers.CPUAuto, Image: sensitive}, cur1)
	cur2, _ := app.Get(2).Current()
	m.add(2, containers.Container{Name: "wys-auto-c2", CPU: containers.CPUAuto, Image: unprofiled}, cur2)
	if !m.manages(1) || m.manages(2) {
		t.Fatalf("manages as C1: profiled %v, unprofiled %v; want true, false", m.manages(1), m.manages(2))
	}
	n := hostCPUs()
	top := wysiwyg.NewCPUSet(n - 1).String()
	if got := cpus(groups[1]); got != top {
		t.Fatalf("profiled auto container's cpuset %q, want the exclusive top core %s", got, top)
	}
	if got := cpus(groups[2]); got != wysiwyg.Range(n-1).String() {
		t.Fatalf("unprofiled auto container's cpuset %q, want the shared pool %s", got, wysiwyg.Range(n-1))
	}
}

// openEntry makes a test cgroup with the given CPU quota, opens it and
// adds it to app under handle h.
func openEntry(t *testing.T, app *limits.Applier, h uint32, name, quota string) *cgroups.Group {
	t.Helper()
	rel := cgtest.New(t, name)
	cgtest.Write(t, "cpu", rel, "cpu.cfs_quota_us", quota)
	g := cgtest.Open(t, rel)
	e, err := limits.NewEntry(name, false, g)
	if err != nil {
		t.Fatal(err)
	}
	app.Add(h, e)
	return g
}

// cpus reads a group's cpuset.cpus.
func cpus(g *cgroups.Group) string {
	var buf [64]byte
	b, _ := g.Read(cgroups.CPUSetCPUs, buf[:])
	return strings.TrimSpace(string(b))
}

// A hand-started container's view: ⌈cpus⌉ CPUs numbered from the top, and
// a directory left where the file belongs (docker run -v of a missing
// source) is replaced by the file.
func TestPrepareHandView(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "web", "online"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := PrepareHandView(dir, "web", 0.5)
	if err != nil {
		t.Fatal(err)
	}
	n := hostCPUs()
	want := fmt.Sprintf("%d\n", n-1)
	if b, err := os.ReadFile(p); err != nil || string(b) != want {
		t.Fatalf("view %q (%v), want %q", b, err, want)
	}
	if got := ViewMount(p); got != "type=bind,source="+p+",target=/sys/devices/system/cpu/online,readonly" {
		t.Errorf("mount %q", got)
	}
	if p, err = PrepareHandView(dir, "all", 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); n > 1 && string(b) != fmt.Sprintf("0-%d\n", n-1) {
		t.Errorf("view of every CPU %q", b)
	}
	for _, bad := range []struct {
		name string
		cpus float64
	}{{"../x", 1}, {"", 1}, {"web", -1}} {
		if _, err := PrepareHandView(dir, bad.name, bad.cpus); err == nil {
			t.Errorf("PrepareHandView(%q, %v) accepted", bad.name, bad.cpus)
		}
	}
}
