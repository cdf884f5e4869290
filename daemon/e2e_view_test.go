package daemon_test

// A WYSIWYG container started by hand with docker run, on the real engine:
// the one documented command (docs/wysiwyg.md) starts Debian's nginx with
// worker_processes auto, and nginx starts one worker per core its view
// gives it, while the same nginx without the view starts one per host CPU.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/workloadimages"
)

const nginxAuto = `worker_processes auto;
daemon off;
master_process on;
user root;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path /tmp/nginx-body;
    proxy_temp_path /tmp/nginx-proxy;
    fastcgi_temp_path /tmp/nginx-fastcgi;
    uwsgi_temp_path /tmp/nginx-uwsgi;
    scgi_temp_path /tmp/nginx-scgi;
    server { listen 127.0.0.1:8081; location / { return 200 "ok\n"; } }
}
`

// nginxWorkers counts the container's nginx worker processes once their
// number has held for half a second.
func nginxWorkers(t *testing.T, cli *client.Client, id string) int {
	t.Helper()
	last, same := -1, 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		top, err := cli.ContainerTop(context.Background(), id, client.ContainerTopOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range top.Processes {
			if strings.Contains(strings.Join(p, " "), "nginx: worker process") {
				n++
			}
		}
		if n > 0 && n == last {
			if same++; same >= 5 {
				return n
			}
		} else {
			last, same = n, 0
		}
	}
	t.Fatalf("container %s: nginx workers never settled (last %d)", id, last)
	return 0
}

func TestE2EHandStartedWysiwygNginx(t *testing.T) {
	cli := dockertest.Client(t, "")
	if _, err := os.Stat("/sys/fs/cgroup/cpuset"); err != nil {
		t.Skip("needs the cgroup v1 cpuset controller")
	}
	if hostCPUsForTest() < 2 {
		t.Skip("needs 2 CPUs: one for the container, one shared")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("needs the docker command: the test runs the documented command line")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	img, err := (&workloadimages.Builder{Docker: cli, RepoRoot: dockertest.RepoRoot()}).Build(ctx, workloadimages.Nginx)
	if err != nil {
		t.Fatal(err)
	}
	app := appLabel(t)[containers.AppLabel]
	removeApp(cli, app) // left by a killed run
	p := startPeer(t)
	views := t.TempDir()
	startAgent(t, "", p.Addr(), func(c *agent.Config) { c.ViewDir = views; c.CPUPlacement = agent.CPUPlacementHard })
	conf := filepath.Join(t.TempDir(), "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxAuto), 0o644); err != nil {
		t.Fatal(err)
	}
	dockerRun := func(name string, extra ...string) string {
		t.Helper()
		args := append([]string{"-H", "unix://" + dockertest.Socket, "run", "-d", "--name", name, "--network", "none",
			"-v", conf + ":/etc/nginx/auto.conf:ro", "--entrypoint", "/usr/sbin/nginx"}, extra...)
		args = append(args, img, "-e", "stderr", "-c", "/etc/nginx/auto.conf")
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		id := strings.TrimSpace(string(out))
		t.Cleanup(func() { dockertest.Remove(cli, id) })
		return id
	}

	// The documented command: the view prepared for NAME, then docker run
	// with what escrad view prepare prints (agent.PrepareHandView and
	// ViewMount are that command's body).
	name := dockertest.UniqueName("wys-hand")
	view, err := agent.PrepareHandView(views, name, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := dockerRun(name, "--cpus", "1", "--label", containers.AppLabel+"="+app, "--label", containers.CPULabel+"="+containers.CPUWysiwyg,
		"--mount", agent.ViewMount(view))
	if p.WaitRegistered(id, 10*time.Second) == nil {
		t.Fatal("the hand-started container never registered")
	}
	if n := nginxWorkers(t, cli, id); n != 1 {
		t.Errorf("nginx started %d workers with a 1-CPU view, want 1", n)
	}
	// escrad placed it (C1: one exclusive core) and keeps the view equal
	// to its cpuset.
	// The image has no shell or cat: the host side is read, the file
	// the container has mounted on its online list (nginx's count above).
	var cpus, inView string
	waitFor(t, 10*time.Second, "the view to follow a one-core cpuset", func() bool {
		cpus = cpusetOf(t, cli, id)
		b, err := os.ReadFile(view)
		inView = strings.TrimSpace(string(b))
		return err == nil && inView == cpus && countCPUs(t, cpus) == 1
	})
	t.Logf("placed on CPU %s; its view lists %s", cpus, inView)

	// The same nginx without a view counts every host CPU.
	plain := dockerRun(dockertest.UniqueName("wys-plain"), "--cpus", "1")
	if n, want := nginxWorkers(t, cli, plain), hostCPUsForTest(); n != want {
		t.Errorf("nginx without a view started %d workers, want one per host CPU (%d)", n, want)
	}
}

// cpusetOf is the container's cpuset.cpus as its cgroup holds it.
func cpusetOf(t *testing.T, cli *client.Client, id string) string {
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
	return strings.TrimSpace(string(b))
}
