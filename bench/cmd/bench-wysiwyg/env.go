package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/peer"
	"github.com/escra-dev/escra/internal/workloadimages"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

const benchApp = "wys-bench"

// env is the real engine, the images, and an escrad agent (its real
// allocator) talking to a scripted controller.
type env struct {
	cli     *client.Client
	nginx   string
	sysb    string
	gowork  string
	busy    string
	views   string
	peer    *peer.Peer
	agent   *agent.Agent
	stop    func()
	created []string
	lxcfs   *exec.Cmd // nil: no LXCFS on this host
	lxcMnt  string
}

func newEnv(ctx context.Context, log *slog.Logger) (*env, error) {
	cli, err := containers.NewDockerClient(*docker)
	if err != nil {
		return nil, err
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, fmt.Errorf("docker engine: %w (make setup starts it)", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpuset"); err != nil {
		return nil, errors.New("needs the cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset")
	}
	e := &env{cli: cli}
	repo, err := workloadimages.RepoRoot(".")
	if err != nil {
		return nil, err
	}
	b := &workloadimages.Builder{Docker: cli, RepoRoot: repo, Log: func(s string) { say("%s", s) }}
	if e.nginx, err = b.Build(ctx, nginxAuto); err != nil {
		return nil, err
	}
	if e.sysb, err = b.Build(ctx, sysbenchImg); err != nil {
		return nil, err
	}
	if e.gowork, err = b.Build(ctx, goworkImg); err != nil {
		return nil, err
	}
	if e.busy, err = dockertest.ImportBusybox(ctx, cli); err != nil {
		return nil, err
	}
	if e.views, err = os.MkdirTemp("", "wys-views-"); err != nil {
		return nil, err
	}
	if e.peer, err = peer.Start(); err != nil {
		return nil, err
	}
	e.agent, err = agent.New(agent.Config{HostID: "wys-bench", Controller: e.peer.Addr(), Period: 100 * time.Millisecond,
		OOMDeadline: 200 * time.Millisecond, Heartbeat: time.Second, Backend: agent.BackendCgroupfs, Docker: cli,
		Log: log, Apps: []string{benchApp}, CPUPlacement: agent.CPUPlacementHard, ViewDir: e.views})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.agent.Run(actx) }()
	e.stop = func() { cancel(); wg.Wait() }
	<-e.agent.Started()
	e.startLXCFS()
	return e, nil
}

// startLXCFS mounts a private LXCFS (Debian lxcfs) for this run: its
// /proc/cpuinfo and /proc/stat follow the reading container's cpuset
// live. Its /sys/devices/system/cpu/online is not used: with several
// containers reading it the kernel's cached file size truncates the
// longer lists (docs/wysiwyg.md); escrad's own view file replaces it.
func (e *env) startLXCFS() {
	bin, err := exec.LookPath("lxcfs")
	if err != nil {
		say("no lxcfs: /proc/cpuinfo and /proc/stat stay the host's (scripts/setup.sh installs it)")
		return
	}
	dir, err := os.MkdirTemp("", "wys-lxcfs-")
	if err != nil {
		return
	}
	mnt := filepath.Join(dir, "mnt")
	_ = os.Mkdir(mnt, 0o755)
	cmd := exec.Command(bin, "-f", "--enable-cfs", "-p", filepath.Join(dir, "pid"), mnt)
	if err := cmd.Start(); err != nil {
		say("lxcfs did not start: %v", err)
		return
	}
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(filepath.Join(mnt, "proc", "cpuinfo")); err == nil {
			e.lxcfs, e.lxcMnt = cmd, mnt
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	say("lxcfs did not mount within 5 s")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (e *env) close() {
	for _, id := range e.created {
		dockertest.Remove(e.cli, id)
	}
	if e.stop != nil {
		e.stop()
	}
	if e.peer != nil {
		e.peer.Close()
	}
	if e.views != "" {
		os.RemoveAll(e.views)
	}
	if e.lxcfs != nil {
		_ = e.lxcfs.Process.Signal(unix.SIGTERM)
		_ = e.lxcfs.Wait()
		_ = unix.Unmount(e.lxcMnt, unix.MNT_DETACH)
		os.RemoveAll(filepath.Dir(e.lxcMnt))
	}
	e.cli.Close()
}

// start runs a container; wysiwyg labels it for escrad (C1) and mounts
// its online view.
func (e *env) start(ctx context.Context, name, img string, wysiwygC1 bool, quota int64, env []string, cmd []string) (string, error) {
	return e.startManaged(ctx, name, img, wysiwygC1, false, quota, env, cmd)
}

// startManaged is start; managed also puts a shared container under
// escrad (escra.app without escra.cpu).
func (e *env) startManaged(ctx context.Context, name, img string, wysiwygC1, managed bool, quota int64, env []string, cmd []string) (string, error) {
	cfg := &container.Config{Image: img, Env: env, Cmd: cmd, Labels: map[string]string{}}
	if managed {
		cfg.Labels[containers.AppLabel] = benchApp
	}
	hc := &container.HostConfig{NetworkMode: "host"}
	hc.Resources.CPUQuota, hc.Resources.CPUPeriod = quota, 100000
	if wysiwygC1 {
		cfg.Labels[containers.AppLabel] = benchApp
		cfg.Labels[containers.CPULabel] = containers.CPUWysiwyg
		view, err := agent.PrepareView(e.views, name, int((quota+99999)/100000))
		if err != nil {
			return "", err
		}
		hc.Binds = []string{view + ":/sys/devices/system/cpu/online:ro"}
		if e.lxcMnt != "" {
			for _, f := range []string{"/proc/cpuinfo", "/proc/stat"} {
				hc.Binds = append(hc.Binds, e.lxcMnt+f+":"+f+":ro")
			}
		}
	}
	cr, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		return "", err
	}
	e.created = append(e.created, cr.ID)
	if _, err := e.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return cr.ID, err
	}
	return cr.ID, nil
}

func (e *env) exec(ctx context.Context, id string, cmd ...string) (string, error) {
	ex, err := e.cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", err
	}
	at, err := e.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer at.Close()
	var o, er bytes.Buffer
	_, err = stdcopy.StdCopy(&o, &er, at.Reader)
	return strings.TrimSpace(o.String()), err
}

func (e *env) group(ctx context.Context, id string) (*cgroups.Group, error) {
	j, err := dockertest.Inspect(ctx, e.cli, id)
	if err != nil {
		return nil, err
	}
	if j.State == nil || j.State.Pid <= 0 {
		return nil, fmt.Errorf("container %s is not running", id[:12])
	}
	p, err := cgroups.PathsForPID(j.State.Pid)
	if err != nil {
		return nil, err
	}
	return cgroups.Open(p)
}

func readCPUs(g *cgroups.Group) (wysiwyg.CPUSet, error) {
	var buf [256]byte
	b, err := g.Read(cgroups.CPUSetCPUs, buf[:])
	if err != nil {
		return nil, err
	}
	return wysiwyg.ParseCPUSet(string(b))
}

// waitPlaced waits until escrad has given the container n cores.
func (e *env) waitPlaced(ctx context.Context, id string, n int) error {
	g, err := e.group(ctx, id)
	if err != nil {
		return err
	}
	defer g.Close()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		if s, err := readCPUs(g); err == nil && len(s) == n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, _ := readCPUs(g)
	return fmt.Errorf("escrad did not place container %s on %d cores within 10 s (cpuset %s)", id[:12], n, s)
}

// workers counts a container's processes minus one (nginx's master).
func (e *env) workers(ctx context.Context, id string) (int, error) {
	g, err := e.group(ctx, id)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	b, err := os.ReadFile(filepath.Join(g.Paths.CPU, "cgroup.procs"))
	if err != nil {
		return 0, err
	}
	return len(strings.Fields(string(b))) - 1, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitHTTP(ctx context.Context, url string) error {
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		r, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer within 15 s", url)
}
