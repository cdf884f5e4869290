// Package failure kills the real escra-controller and escrad processes (by
// PID) beside the real Docker engine and real cgroups, and checks what a
// user would: containers keep running with sane limits, no OOM wait
// outlives its deadline, nothing is lost or counted twice.
package failure

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/dockertest"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// bins builds escrad and escra-controller once per test binary.
func bins(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "escra-failure-bin-")
		if binErr == nil {
			binErr = dockertest.BuildBinaries(binDir, "./daemon/cmd/escrad", "./controller/cmd/escra-controller")
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is one started binary; its log lines are kept for failure reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	done chan struct{}
}

func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.kill(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s log:\n%s", p.name, p.logText())
		}
	})
	return p
}

func (p *proc) kill(sig syscall.Signal) { _ = syscall.Kill(p.cmd.Process.Pid, sig) }

// sigkill kills by PID and waits until the process is gone.
func (p *proc) sigkill(t *testing.T) {
	t.Helper()
	p.kill(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not die on SIGKILL", p.name)
	}
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

func (p *proc) waitLog(t *testing.T, sub string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.logText(), sub) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q within %v", p.name, sub, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// cluster is one controller and one escrad with mutual TLS.
type cluster struct {
	t                *testing.T
	bin, certs, app  string
	tcp, udp, admin  string
	advertise        string
	apps             string
	ctl, d           *proc
	extraCtl, extraD []string
	oomState         string // escrad's --oom-state, the same across restarts
	state            string // the controller's --state-dir, the same across restarts
}

func newCluster(t *testing.T, cpu string, mem string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: bins(t), certs: t.TempDir()}
	c.oomState = filepath.Join(t.TempDir(), "oom-armed")
	c.state = t.TempDir() // the controller's store, kept across its restarts
	if _, err := auth.Generate(c.certs, []string{"fh1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	c.app = fmt.Sprintf("fail-%d-%d", os.Getpid(), rand.N(1_000_000))
	c.tcp = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.udp = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.admin = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	c.apps = filepath.Join(t.TempDir(), "apps.yaml")
	if err := os.WriteFile(c.apps, fmt.Appendf(nil, "- {name: %s, cpu: %q, memory: %s, sigma: 0.5}\n", c.app, cpu, mem), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) startController() *proc {
	args := []string{"--listen", c.tcp, "--telemetry-listen", c.udp, "--admin-listen", c.admin,
		"--apps", c.apps, "--reclaim-every", "0", "--state-dir", c.state,
		"--tls-ca", auth.CAPath(c.certs), "--tls-cert", auth.CertPath(c.certs, "controller"), "--tls-key", auth.KeyPath(c.certs, "controller")}
	if c.advertise != "" {
		args = append(args, "--telemetry-advertise", c.advertise)
	}
	c.ctl = start(c.t, "escra-controller", filepath.Join(c.bin, "escra-controller"), append(args, c.extraCtl...)...)
	c.ctl.waitLog(c.t, "escra-controller ready", 10*time.Second)
	return c.ctl
}

// daemonArgs are escrad's flags (also given to escrad restore-oom, as a
// systemd unit does).
func (c *cluster) daemonArgs() []string {
	args := []string{"--controller", c.tcp, "--host-id", "fh1", "--apps", c.app, "--backend", "cgroupfs",
		"--docker-host", "unix://" + dockertest.Socket,
		"--tls-ca", auth.CAPath(c.certs), "--tls-cert", auth.CertPath(c.certs, "fh1"), "--tls-key", auth.KeyPath(c.certs, "fh1")}
	if !slices.Contains(c.extraD, "--oom-state") {
		// Not the default under /run/escra: tests keep to their temp dirs.
		args = append(args, "--oom-state", c.oomState)
	}
	return append(args, c.extraD...)
}

func (c *cluster) startDaemon() *proc {
	c.d = start(c.t, "escrad", filepath.Join(c.bin, "escrad"), c.daemonArgs()...)
	c.d.waitLog(c.t, "escrad starting", 10*time.Second)
	return c.d
}

// members is the controller's view of the app's containers.
func (c *cluster) members() ([]server.ContainerState, error) {
	// The admin API is HTTPS; the harness is the operator (admin.pem).
	tc, err := auth.ClientConfig(auth.Files{CA: auth.CAPath(c.certs), Cert: auth.CertPath(c.certs, auth.RoleAdmin), Key: auth.KeyPath(c.certs, auth.RoleAdmin)}, "")
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	r, err := hc.Get("https://" + c.admin + "/v1/containers")
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var all []server.ContainerState
	if err := json.NewDecoder(r.Body).Decode(&all); err != nil {
		return nil, err
	}
	var out []server.ContainerState
	for _, m := range all {
		if m.App == c.app {
			out = append(out, m)
		}
	}
	return out, nil
}

func (c *cluster) labels() map[string]string { return map[string]string{containers.AppLabel: c.app} }

func within(t *testing.T, what string, d time.Duration, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0)
}

func cgroupFor(t *testing.T, cli *client.Client, id string) cgroups.Paths {
	t.Helper()
	j, err := dockertest.Inspect(context.Background(), cli, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cgroups.PathsForPID(j.State.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// oomKillDisabled reads v1 memory.oom_control.
func oomKillDisabled(t *testing.T, p cgroups.Paths) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Memory, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cgroups.KeyedValue(b, "oom_kill_disable")
	return ok && v == 1
}

// underOOM: a task of the group waits at its limit (v1 under_oom).
func underOOM(t *testing.T, p cgroups.Paths) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Memory, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cgroups.KeyedValue(b, "under_oom")
	return ok && v == 1
}

func running(t *testing.T, cli *client.Client, id string) bool {
	t.Helper()
	j, err := dockertest.Inspect(context.Background(), cli, id)
	return err == nil && j.State.Running
}
