package overhead

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/internal/workloadimages"
)

func TestOverheadsOnTheRealEngine(t *testing.T) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag, err := (&workloadimages.Builder{Docker: cli, RepoRoot: root}).Build(ctx, workloadimages.DemoHTTP)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: tag, Cmd: []string{"-listen", fmt.Sprintf("127.0.0.1:%d", port)},
		Labels: map[string]string{"escra.test": "bench-overhead"}}, HostConfig: &container.HostConfig{NetworkMode: "host"}, Name: fmt.Sprintf("escra-test-overhead-%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}) })
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cgroups.PathsForPID(in.Container.State.Pid)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cgroups.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	direct, docker, err := ApplyLatency(ctx, cli, c.ID, g, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply: direct write %v, docker update %v", direct, docker)
	if direct <= 0 || docker <= 0 {
		t.Errorf("latencies %v %v", direct, docker)
	}
	// The last docker update wrote 60000 µs: the cgroup shows it.
	if q, _, err := g.CPULimit(); err != nil || q != 60000 {
		t.Errorf("quota after docker update %d (%v), want 60000", q, err)
	}
	d, err := RestartToServe(ctx, cli, c.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart to serve: %v", d)
	in2, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil || in2.Container.State.Pid == in.Container.State.Pid || !in2.Container.State.Running {
		t.Errorf("container not restarted: pid %d → %d, running %v (%v)", in.Container.State.Pid, in2.Container.State.Pid, in2.Container.State.Running, err)
	}
}
