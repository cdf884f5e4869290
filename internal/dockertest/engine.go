package dockertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Engine is a private dockerd started by a test (its own data root, exec
// root, socket, containerd and cgroup parent), so a test may kill and
// restart it without touching the main engine.
type Engine struct {
	Host         string // unix:///run/escra-test/NAME/docker.sock
	CgroupParent string
	dir, run     string
	args         []string
	cmd          *exec.Cmd
	ctrd         *exec.Cmd
	logPath      string
}

// StartEngine starts a private engine with live-restore (containers keep
// running while it is down) and removes everything when the test ends.
func StartEngine(t testing.TB, name string) *Engine {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed: run `make setup`")
	}
	dir := t.TempDir()
	run := filepath.Join("/run/escra-test", name)
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &Engine{
		Host: "unix://" + filepath.Join(run, "docker.sock"), CgroupParent: "/escra-test-" + name,
		dir: dir, run: run, logPath: filepath.Join(dir, "dockerd.log"),
	}
	e.args = []string{
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(run, "exec"),
		"--pidfile", filepath.Join(run, "dockerd.pid"), "-H", e.Host,
		"--bridge=none", "--iptables=false", "--ip-masq=false", "--ip6tables=false",
		"--containerd-namespace", "escra-test-" + name, "--containerd-plugins-namespace", "escra-test-" + name + "-plugins",
		"--cgroup-parent", e.CgroupParent, "--exec-opt", "native.cgroupdriver=cgroupfs",
		"--storage-driver", "vfs", "--live-restore",
	}
	t.Cleanup(e.cleanup)
	// Our own containerd, so that killing dockerd leaves it (and the
	// containers) alone; a dockerd-managed one dies with its log pipe.
	ctrdDir := filepath.Join(run, "containerd")
	if err := os.MkdirAll(ctrdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[debug]\n  address = %q\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    disable_cgroup = true\n",
		filepath.Join(dir, "containerd-root"), filepath.Join(ctrdDir, "state"),
		filepath.Join(ctrdDir, "containerd.sock"), filepath.Join(ctrdDir, "containerd.sock.ttrpc"), filepath.Join(ctrdDir, "debug.sock"))
	cfgPath := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrd = exec.Command("containerd", "--config", cfgPath)
	e.ctrd.Stdout, e.ctrd.Stderr = logf, logf
	e.ctrd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.ctrd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	logf.Close()
	go func() { _ = e.ctrd.Wait() }()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(filepath.Join(ctrdDir, "containerd.sock")); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.args = append(e.args, "--containerd", filepath.Join(ctrdDir, "containerd.sock"))
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// Start starts (or restarts) dockerd and waits until it answers.
func (e *Engine) Start() error {
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("dockerd", e.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.cmd = cmd
	go func() { _ = cmd.Wait() }()
	cli, err := client.New(client.WithHost(e.Host))
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{})
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(e.logPath)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "module=grpc") && !strings.Contains(l, "loading plugin") {
			keep = append(keep, l)
		}
	}
	return fmt.Errorf("private dockerd did not answer in 60 s: %v\n%s", err, tail(strings.Join(keep, "\n"), 3000))
}

// Kill ends dockerd with SIGKILL (its containerd and containers live on).
func (e *Engine) Kill() {
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Signal(syscall.SIGKILL)
		for i := 0; i < 100 && syscall.Kill(e.cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}
	e.cmd = nil
}

// cleanup removes the engine's containers, stops dockerd and its
// containerd (by their pid files), unmounts and deletes its directories
// and cgroups.
func (e *Engine) cleanup() {
	if e.cmd == nil {
		_ = e.Start() // so its containers can be removed properly
	}
	if cli, err := client.New(client.WithHost(e.Host)); err == nil {
		RemoveAllTest(cli)
		cli.Close()
	}
	// Whatever survived (engine failed to come back): kill the tasks in the
	// engine's cgroup parent and the shims of its containerd namespace.
	killTasks(filepath.Join("/sys/fs/cgroup/memory", e.CgroupParent))
	killShims("escra-test-" + filepath.Base(e.run))
	if e.cmd != nil && e.cmd.Process != nil {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		for i := 0; i < 500 && syscall.Kill(e.cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		_ = e.cmd.Process.Signal(syscall.SIGKILL)
	}
	if e.ctrd != nil && e.ctrd.Process != nil {
		pid := e.ctrd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 250 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountUnder(e.run)
	unmountUnder(e.dir)
	_ = os.RemoveAll(e.run)
	for _, c := range []string{"cpu", "cpuacct", "memory", "cpuset", "pids", "blkio", "devices", "freezer", "systemd", "net_cls,net_prio", "perf_event", "hugetlb", "unified"} {
		removeTree(filepath.Join("/sys/fs/cgroup", c, e.CgroupParent))
	}
}

// unmountUnder lazily unmounts every mount below dir (deepest first).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var ms []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			ms = append(ms, f[4])
		}
	}
	for i := len(ms) - 1; i >= 0; i-- {
		_ = syscall.Unmount(ms[i], syscall.MNT_DETACH)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// removeTree removes an (empty of tasks) cgroup directory tree, deepest first.
func removeTree(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

func killTasks(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// killShims ends the containerd shims serving namespace ns (only ours).
func killShims(ns string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && args[1] == "-namespace" && args[2] == ns {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
