package daemon_test

// WYSIWYG containers on the real engine: escra.cpu=wysiwyg containers get a cpuset
// that follows the quota the controller sets, shared containers' cpusets
// shrink and grow around it, Docker's view follows, and what the
// container sees (nproc, /sys/devices/system/cpu/online) matches.

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

func dockerExec(t *testing.T, cli *client.Client, id string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	at, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, at.Reader); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out.String())
}

// seen is what a container sees and what its cgroup holds.
type seen struct {
	cgroupCPUs, online, nproc string
	quota                     int64
}

func look(t *testing.T, cli *client.Client, id string) seen {
	t.Helper()
	g, err := cgroups.Open(cgroupOf(t, inspectPid(t, cli, id)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var buf [256]byte
	b, err := g.Read(cgroups.CPUSetCPUs, buf[:])
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := g.CPULimit()
	if err != nil {
		t.Fatal(err)
	}
	return seen{
		cgroupCPUs: strings.TrimSpace(string(b)), quota: q,
		online: dockerExec(t, cli, id, "cat", "/sys/devices/system/cpu/online"),
		nproc:  dockerExec(t, cli, id, "nproc"),
	}
}

func countCPUs(t *testing.T, list string) int {
	s, err := wysiwyg.ParseCPUSet(list)
	if err != nil {
		t.Fatalf("cpu list %q: %v", list, err)
	}
	return len(s)
}

func TestE2EWysiwygCpusetFollowsQuota(t *testing.T) {
	cli := dockertest.Client(t, "")
	if _, err := os.Stat("/sys/fs/cgroup/cpuset"); err != nil {
		t.Skip("needs the cgroup v1 cpuset controller")
	}
	if hostCPUsForTest() < 2 {
		t.Skip("needs 2 CPUs")
	}
	img := dockertest.BusyboxImage(t, cli)
	removeApp(cli, appLabel(t)[containers.AppLabel]) // left by a killed run
	p := startPeer(t)
	views := t.TempDir()
	a := startAgent(t, "", p.Addr(), func(c *agent.Config) { c.ViewDir = views; c.CPUPlacement = agent.CPUPlacementHard })
	time.Sleep(300 * time.Millisecond)

	run := func(name string, cpu string, quota int64) string {
		view, err := agent.PrepareView(views, name, 0)
		if err != nil {
			t.Fatal(err)
		}
		labels := appLabel(t)
		if cpu != "" {
			labels[containers.CPULabel] = cpu
		}
		return dockertest.Run(t, cli, dockertest.Spec{Name: name, Image: img, Cmd: []string{"while true; do sleep 1; done"},
			Labels: labels, Resources: container.Resources{CPUQuota: quota, CPUPeriod: 100000},
			Binds: []string{view + ":/sys/devices/system/cpu/online:ro"}})
	}
	shared := run(dockertest.UniqueName("wys-e2e-c2"), "", 50000)
	c1 := run(dockertest.UniqueName("wys-e2e-c1"), containers.CPUWysiwyg, 50000)
	regC1 := p.WaitRegistered(c1, 5*time.Second)
	if regC1 == nil || p.WaitRegistered(shared, 5*time.Second) == nil {
		t.Fatal("containers never registered")
	}
	h := regC1.Handle

	// check compares the files with what the allocator intended and the
	// invariants read from the files alone.
	check := func(step string, wantC1 int, wantShared int) (seen, seen) {
		t.Helper()
		s1, s2 := look(t, cli, c1), look(t, cli, shared)
		if n := countCPUs(t, s1.cgroupCPUs); n != wantC1 {
			t.Errorf("%s: C1 cpuset.cpus %q, want %d cores", step, s1.cgroupCPUs, wantC1)
		}
		if n := countCPUs(t, s2.cgroupCPUs); n != wantShared {
			t.Errorf("%s: C2 cpuset.cpus %q, want %d cores", step, s2.cgroupCPUs, wantShared)
		}
		// What the container sees is its cpuset: nproc (affinity) and the
		// online list glibc's sysconf counts.
		for _, s := range []seen{s1, s2} {
			if s.online != s.cgroupCPUs || s.nproc != strconv.Itoa(countCPUs(t, s.cgroupCPUs)) {
				t.Errorf("%s: container sees online %q nproc %s, cgroup holds %q", step, s.online, s.nproc, s.cgroupCPUs)
			}
		}
		v := wysiwyg.NewView()
		for id, s := range map[string]seen{"c1": s1, "c2": s2} {
			set, _ := wysiwyg.ParseCPUSet(s.cgroupCPUs)
			v.CPUs[id], v.Milli[id] = set, toMilliTest(s.quota)
		}
		v.Class["c1"] = wysiwyg.C1
		if bad := v.Check(nil, nil); len(bad) > 0 {
			t.Errorf("%s: invariants broken: %v", step, bad)
		}
		return s1, s2
	}
	set := func(quota int64) *pb.SetLimitsAck {
		t.Helper()
		ack, err := p.SetLimits(context.Background(), &pb.LimitUpdate{Handle: h, Limits: &pb.Limits{CpuQuotaUs: quota}})
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}

	// 0.5 core: a fraction on one core, shared with the C2 pool.
	check("0.5 core", 1, 2)
	// The deployer's question (§IV-D, offloaded to the host): how would a
	// new C1 container fare here? 1.5 cores: one P1 core and 500m on the
	// P2 core; 2 cores: refused, the host has 1.5 left for C1 containers.
	for _, q := range []struct {
		milli      uint32
		p1, shared uint32
		refused    bool
	}{{1500, 1, 500, false}, {2000, 0, 0, true}} {
		qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ans, err := p.SimulateCPU(qctx, &pb.CpuPlacementQuery{Millicores: q.milli, Wysiwyg: true})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Enabled || (ans.Refused != "") != q.refused || !q.refused && (ans.P1Cores != q.p1 || ans.SharedMillicores != q.shared) {
			t.Errorf("simulated %dm: %+v", q.milli, ans)
		}
	}
	// 1 core: an exclusive P1 core; the shared container loses it.
	set(100000)
	s1, s2 := check("1 core", 1, 1)
	if s1.cgroupCPUs == s2.cgroupCPUs || s1.quota != 100000 {
		t.Errorf("1 core: C1 %+v shares its P1 core with C2 %+v", s1, s2)
	}
	// 1.5 cores: 2 cores seen, the second shared (P2).
	set(150000)
	check("1.5 cores", 2, 1)
	// 2 cores on a 2-core host with a shared container: not WYSIWYG;
	// principle-hard caps the quota and says why.
	ack := set(200000)
	if len(ack.Applied) != 1 || !strings.Contains(ack.Applied[0].Error, "WYSIWYG") {
		t.Errorf("2 cores: ack %+v, want a WYSIWYG refusal", ack.Applied)
	}
	if s := look(t, cli, c1); s.quota != 150000 {
		t.Errorf("2 cores refused: quota %d, want the 1.5-core layout's 150000", s.quota)
	}
	// Back to 0.5: the cpuset shrinks only after the hysteresis hold,
	// as the controller keeps sending the quota every period.
	set(50000)
	check("0.5 core within the hold", 2, 1)
	deadline := time.Now().Add(wysiwyg.DefaultHold + 2*time.Second)
	for time.Now().Before(deadline) {
		set(50000)
		time.Sleep(100 * time.Millisecond)
	}
	check("0.5 core after the hold", 1, 2)

	// Docker's view follows within the reconcile window.
	waitFor(t, 15*time.Second, "docker inspect shows the C1 cpuset", func() bool {
		j, err := dockertest.Inspect(context.Background(), cli, c1)
		return err == nil && j.HostConfig.CpusetCpus == look(t, cli, c1).cgroupCPUs
	})
	// The C1 container goes away: the shared pool gets every core back.
	dockertest.Remove(cli, c1)
	waitFor(t, 15*time.Second, "shared cpuset grows back", func() bool {
		return countCPUs(t, look(t, cli, shared).cgroupCPUs) == hostCPUsForTest()
	})
	if n := len(a.CPUSetChanges()); n == 0 {
		t.Error("no cpuset change recorded")
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if ok() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s: not within %v", what, d)
}

func toMilliTest(q int64) int64 {
	if q <= 0 {
		return 0
	}
	return (q*1000 + 99999) / 100000
}

func hostCPUsForTest() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	s, err := wysiwyg.ParseCPUSet(string(b))
	if err != nil {
		return 0
	}
	return len(s)
}

// removeApp removes every container of app (this test's own label).
func removeApp(cli *client.Client, app string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = containers.Remove(ctx, cli, app, nil)
}
