package main

// The cgroupfs scenarios run the real escrad binary (/escrad, built by
// run.sh) with --backend=cgroupfs on this guest's cgroup v2: the stock-
// kernel backend a Debian 12 host without escra.ko gets. escra.ko stays
// loaded for the other scenarios, but this daemon does not use it (the
// controller sees BACKEND_CGROUPFS). What they check is what a user checks:
// the controller's view (escractl status), memory.events, memory.high,
// exit codes, escrad's /metrics.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/vm-tests/harness"
)

const escradBin = "/escrad"

// escradProc is one escrad child process.
type escradProc struct {
	cmd     *exec.Cmd
	metrics string // host:port of /metrics
	mu      sync.Mutex
	lines   []string
	done    chan struct{}
}

// startEscrad runs escrad on the plain cgroups of specs (name, app, path
// triples) against controller, with a 1 s verdict deadline (a TCG guest on
// a shared host is 10-50x slower than hardware).
func startEscrad(controller string, specs [][3]string, extra ...string) (*escradProc, error) {
	var y strings.Builder
	y.WriteString("no_docker: true\ninsecure: true\nbackend: cgroupfs\nhost_id: vm-cgroupfs\ncgroups:\n")
	for _, s := range specs {
		fmt.Fprintf(&y, "  - {name: %s, app: %s, path: %s}\n", s[0], s[1], s[2])
	}
	cfg := "/tmp/escrad-" + specs[0][0] + ".yaml"
	if err := os.WriteFile(cfg, []byte(y.String()), 0o644); err != nil {
		return nil, err
	}
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &escradProc{metrics: "127.0.0.1:" + strconv.Itoa(mport), done: make(chan struct{})}
	args := append([]string{"--config", cfg, "--backend=cgroupfs", "--controller", controller,
		"--oom-deadline", "1s", "--metrics-listen", p.metrics, "--log-level", "info"}, extra...)
	p.cmd = exec.Command(escradBin, args...)
	p.cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	r, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout = os.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start escrad: %w", err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l := sc.Text()
			if !strings.Contains(l, "controller link down") { // once per backoff step
				fmt.Println("    escrad|", l)
			}
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// stop ends escrad with SIGTERM (it restores what it changed) and waits.
func (p *escradProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if _, err := harness.WaitTimeout(p.cmd, 10*time.Second); err != nil {
		fmt.Println("    escrad did not stop on SIGTERM:", err)
	}
	<-p.done
}

// logged waits up to d for a log line containing every part.
func (p *escradProc) logged(d time.Duration, parts ...string) (string, bool) {
	for end := time.Now().Add(d); ; {
		p.mu.Lock()
		for _, l := range p.lines {
			ok := true
			for _, s := range parts {
				ok = ok && strings.Contains(l, s)
			}
			if ok {
				p.mu.Unlock()
				return l, true
			}
		}
		p.mu.Unlock()
		if time.Now().After(end) {
			return "", false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric reads one sample of escrad's /metrics ("name{labels}" exactly).
func (p *escradProc) metric(series string) float64 {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// checkBackend: the controller saw this host on the cgroupfs backend and
// escrad said so in its start line, on cgroup v2.
func checkBackend(srv *server.Server, p *escradProc) error {
	if _, ok := p.logged(10*time.Second, "escrad starting", "backend=cgroupfs", "cgroup=v2"); !ok {
		return errors.New("escrad did not log its start with backend=cgroupfs cgroup=v2")
	}
	for _, h := range srv.Snapshot().Hosts {
		if h.HostID == "vm-cgroupfs" && h.Backend != "BACKEND_CGROUPFS" {
			return fmt.Errorf("controller sees backend %s, want BACKEND_CGROUPFS", h.Backend)
		}
	}
	return nil
}
