package containers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

// The deployer's Docker side on the real engine: limits, label, env and
// argv reach the container; a missing image and a taken name are one clear
// error; Remove touches only the app's labelled containers.
func TestCreateAndRemoveOnTheEngine(t *testing.T) {
	cli := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, cli)
	ctx := context.Background()
	app := dockertest.UniqueName("deploy")
	spec := containers.CreateSpec{App: app, Name: app + "-a", Image: img, Command: []string{"/bin/spin", "-idle"},
		Env: []string{"K=v"}, Network: "none",
		Limits: containers.Limits{CPUQuotaUs: 30000, CPUPeriodUs: 100000, MemoryBytes: 64 << 20}}
	id, err := containers.Create(ctx, cli, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(cli, id) })
	j, err := dockertest.Inspect(ctx, cli, id)
	if err != nil {
		t.Fatal(err)
	}
	if !j.State.Running || j.Config.Labels[containers.AppLabel] != app || j.HostConfig.CPUQuota != 30000 ||
		j.HostConfig.CPUPeriod != 100000 || j.HostConfig.Memory != 64<<20 || string(j.HostConfig.NetworkMode) != "none" {
		t.Fatalf("container: running %v, labels %v, quota %d/%d, memory %d, network %s", j.State.Running, j.Config.Labels,
			j.HostConfig.CPUQuota, j.HostConfig.CPUPeriod, j.HostConfig.Memory, j.HostConfig.NetworkMode)
	}
	if got := strings.Join(j.Config.Entrypoint, " "); got != "/bin/spin -idle" || len(j.Config.Cmd) != 0 {
		t.Errorf("argv: entrypoint %q, cmd %q; want the spec's command alone", got, j.Config.Cmd)
	}
	if !strings.Contains(strings.Join(j.Config.Env, " "), "K=v") {
		t.Errorf("env %v lacks K=v", j.Config.Env)
	}

	if _, err := containers.Create(ctx, cli, spec); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("same name again: %v", err)
	}
	missing := spec
	missing.Name, missing.Image = app+"-b", "escra-test/none:1"
	if _, err := containers.Create(ctx, cli, missing); err == nil || !strings.Contains(err.Error(), "escra-test/none:1 is not on engine") {
		t.Errorf("missing image: %v", err)
	}
	bad := spec
	bad.Network = "bridge"
	if _, err := containers.Create(ctx, cli, bad); err == nil {
		t.Errorf("network bridge accepted")
	}

	// A container of another app survives Remove.
	other := spec
	other.App, other.Name = app+"-other", app+"-other"
	oid, err := containers.Create(ctx, cli, other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dockertest.Remove(cli, oid) })
	removed, err := containers.Remove(ctx, cli, app, nil)
	if err != nil || len(removed) != 1 || removed[0] != id {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	if _, err := dockertest.Inspect(ctx, cli, id); err == nil {
		t.Errorf("container still exists after Remove")
	}
	if j, err := dockertest.Inspect(ctx, cli, oid); err != nil || !j.State.Running {
		t.Errorf("another app's container was touched: %v", err)
	}
}
