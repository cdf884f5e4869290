// Package etcdtest starts a real etcd (Debian's etcd-server) for tests: on
// kernel-picked loopback ports, with a temporary data directory, killed
// and removed when the test ends.
package etcdtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Etcd is one running etcd member.
type Etcd struct {
	Endpoint string // HOST:PORT of the client URL
	Cmd      *exec.Cmd
}

// TLS is etcd's own client TLS: its server certificate and key, and the
// CA that client certificates must chain to (--client-cert-auth).
type TLS struct{ CA, Cert, Key string }

// URL is the controller's --store value.
func (e *Etcd) URL() string { return "etcd://" + e.Endpoint }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs etcd, or skips the test when no etcd binary is installed
// (scripts/setup.sh installs etcd-server).
func Start(t testing.TB) *Etcd { t.Helper(); return StartTLS(t, nil) }

// StartTLS is Start with the client port on HTTPS when tc is not nil:
// etcd requires a client certificate signed by tc.CA.
func StartTLS(t testing.TB, tc *TLS) *Etcd {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd not installed (scripts/setup.sh installs etcd-server)")
	}
	var last error
	for try := 0; try < 3; try++ {
		e, err := start(t, bin, tc)
		if err == nil {
			return e
		}
		last = err // a port taken between picking and binding: again
	}
	t.Fatal(last)
	return nil
}

func start(t testing.TB, bin string, tc *TLS) (*Etcd, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	args := []string{"--name", "escra-test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "escra-test=" + peer, "--initial-cluster-state", "new"}
	if tc != nil {
		args = append(args, "--client-cert-auth", "--trusted-ca-file", tc.CA, "--cert-file", tc.Cert, "--key-file", tc.Key)
	}
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// etcd dies with the test binary even if a timeout kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
	}
	e := &Etcd{Endpoint: fmt.Sprintf("127.0.0.1:%d", cp), Cmd: cmd}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			return nil, fmt.Errorf("etcd exited: %v: %s", err, tail(string(b)))
		default:
		}
		if c, err := net.DialTimeout("tcp", e.Endpoint, 200*time.Millisecond); err == nil {
			c.Close()
			t.Cleanup(stop)
			return e, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("etcd did not listen on %s within 15 s", e.Endpoint)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}
