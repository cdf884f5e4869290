package daemon_test

// Host-local memory credit on the real engine and real cgroups: a
// labelled container whose own Docker limit is above what Escra gave it
// outgrows its limit while the controller is reachable; escrad answers
// every OOM from the app's credit (no OOM request travels), and the
// controller's books then count the raised limit as the member's.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

func oomVia(t *testing.T, a *agent.Agent) map[string]float64 {
	t.Helper()
	mfs, err := a.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "escrad_oom_rescues_total" {
			for _, m := range mf.Metric {
				out[m.Label[0].GetValue()] = m.Counter.GetValue()
			}
		}
	}
	return out
}

func TestOOMAnsweredFromMemoryCreditControllerBooksFollow(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	app := appLabel(t)[containers.AppLabel]
	// Eq. (2): the one container gets 256 MiB × (1 − 0.875) = 32 MiB; its
	// own 512 MiB limit is above the app's budget, so it is not adopted.
	// Half of the 224 MiB left is lent to the host (mem_credit_fraction).
	const budget = 256 << 20
	s := startController(t, server.AppSpec{Name: app, CPUCores: 1, MemoryBytes: budget, Sigma: 0.875})
	a := startAgent(t, "", s.TCPAddr(), verdictNotDeadline)
	id := dockertest.Run(t, cli, dockertest.Spec{Name: dockertest.UniqueName("e2e-credit"), Image: img, Labels: appLabel(t),
		Entrypoint: []string{"/bin/memhog"}, Cmd: []string{"-wait-usr1", "-mib", "96", "-step-mib", "8", "-pause", "50ms", "-hold", "3s"},
		Resources: container.Resources{Memory: 512 << 20, MemorySwap: 512 << 20}})
	// Generous: on a loaded machine the engine can take seconds to start it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m := member(s, id)
		_, credit := a.MemCreditOf(app)
		if a.IsManaged(id) && m != nil && m.MemoryLimitBytes == 32<<20 && credit > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not bootstrapped with credit lent within 30 s: member %+v, credit %d", m, credit)
		}
	}
	if err := dockertest.StartHog(context.Background(), cli, id); err != nil {
		t.Fatal(err)
	}
	j, err := dockertest.Inspect(context.Background(), cli, id)
	if err != nil {
		t.Fatal(err)
	}
	if !j.State.Running {
		t.Fatal("hog not running")
	}
	limitFile := filepath.Join(cgroupOf(t, j.State.Pid).Memory, "memory.limit_in_bytes")
	// While the hog holds its 96 MiB: every rescue came from the host's
	// credit, and the uses reached the controller, which counts the
	// cgroup's limit as the member's and each use as a granted OOM
	// request, with Σ limits + Σ credit within the budget.
	var cg int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(limitFile)
		if err != nil {
			t.Fatalf("hog gone before the books were checked: %v", err)
		}
		cg, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		via := oomVia(t, a)
		m := member(s, id)
		var st server.AppState
		for _, x := range s.Snapshot().Apps {
			if x.Name == app {
				st = x
			}
		}
		if st.MemoryAllocatedBytes+st.MemoryCreditBytes > budget {
			t.Fatalf("Σ limits %d + Σ credit %d over the budget", st.MemoryAllocatedBytes, st.MemoryCreditBytes)
		}
		if via["controller"] != 0 {
			t.Fatalf("rescues by who answered %v: want all from the host's credit while the controller is reachable", via)
		}
		if via["credit"] > 0 && cg > 96<<20 && m != nil && m.MemoryLimitBytes == cg && m.OOMGrants == uint64(via["credit"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("controller's member %+v; cgroup limit %d; rescues %v", m, cg, via)
		}
	}
	if !a.Connected() {
		t.Fatal("the controller session dropped: the test no longer shows a local answer with the controller up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Docker's OOMKilled flag is set by any OOM episode on cgroup v1,
	// survived or not: the exit code tells.
	code, _, err := dockertest.Wait(ctx, cli, id)
	if err != nil {
		t.Fatalf("container hung or vanished: %v", err)
	}
	if code != 0 {
		t.Fatalf("exit %d; want 0: rescued from credit", code)
	}
}
