package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/simdaemon"
)

// The real binary: starts on kernel-picked ports, loads --apps, serves a
// daemon session and the admin API, and stops on SIGTERM.
func TestControllerProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "escra-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	apps := filepath.Join(t.TempDir(), "apps.yaml")
	writeFile(t, apps, "- {name: web, cpu: \"2\", memory: 1GiB, sigma: 0.5}\n")
	cmd := exec.Command(bin, "--insecure", "--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--apps", apps, "--reclaim-every", "0", "--state-dir", t.TempDir())
	// The child dies with the test binary, even if a timeout kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := regexp.MustCompile(`escra-controller ready.* sessions=(\S+) telemetry=\S+ admin=(\S+)`)
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	var m []string
	select {
	case m = <-found:
	case <-time.After(10 * time.Second):
		t.Fatal("no ready line")
	}
	d, err := simdaemon.Dial(m[1], "h", 4, 8<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Register(1, "web", -1, 0, 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _ := d.Container(1)
		if c.QuotaUs == 200000 && c.MemLimit == 512<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not bootstrapped: %+v", c)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + m[2] + "/v1/containers")
	if err != nil {
		t.Fatal(err)
	}
	var cs []server.ContainerState
	json.NewDecoder(resp.Body).Decode(&cs)
	resp.Body.Close()
	if len(cs) != 1 || cs[0].App != "web" || cs[0].CPUQuotaUs != 200000 {
		t.Fatalf("containers: %+v", cs)
	}
	cmd.Process.Signal(sigterm)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// buildController builds the binary once per test.
func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "escra-controller")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startController starts bin and returns it with its session and admin
// addresses from the ready line.
func startController(t *testing.T, bin string, args ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := regexp.MustCompile(`escra-controller ready.* sessions=(\S+) telemetry=\S+ admin=(\S+)`)
	found := make(chan []string, 1)
	var lines []string
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	select {
	case m := <-found:
		return cmd, m[1], m[2]
	case <-time.After(10 * time.Second):
		t.Fatalf("no ready line %v", lines)
	}
	return nil, "", ""
}

// What escractl apply set survives a SIGKILL of the controller: the real
// binary with its default (secure) admin API and a bolt store in
// --state-dir; after the restart every app's budget, σ, parameters and
// policy are the same, and a second controller on the same directory is
// refused in one line while the first runs.
func TestAppliedStateSurvivesSIGKILL(t *testing.T) {
	bin := buildController(t)
	certs, state := t.TempDir(), t.TempDir()
	if _, err := auth.Generate(certs, []string{"h1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	args := []string{"--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--reclaim-every", "0", "--state-dir", state,
		"--tls-ca", auth.CAPath(certs), "--tls-cert", auth.CertPath(certs, "controller"), "--tls-key", auth.KeyPath(certs, "controller")}
	cmd, _, admin := startController(t, bin, args...)
	tc, err := adminclient.OperatorTLS(certs, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	p := allocator.DefaultParams()
	p.Kappa, p.Gamma, p.Upsilon, p.Window = 0.7, 0.25, 9, 7
	want := []adminclient.AppBudget{
		{Name: "shop", CPUCores: 3.5, MemoryBytes: 3 << 30, Sigma: 0.3, Params: &p, Policy: allocator.PolicyEscraPaper},
		{Name: "batch", CPUCores: 1, MemoryBytes: 512 << 20, Sigma: 0.1},
	}
	c, err := adminclient.NewTLS(admin, tc)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range want {
		if err := c.PutApp(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	before, err := c.Apps(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	if code := run(append(slices.Clone(args), "--admin-listen", ""), &stderr); code == 0 || strings.Count(stderr.String(), "\n") != 1 ||
		!strings.Contains(stderr.String(), "another escra-controller") {
		t.Fatalf("second controller on the same --state-dir: exit %d, %q", code, stderr.String())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	_, _, admin = startController(t, bin, args...)
	if c, err = adminclient.NewTLS(admin, tc); err != nil {
		t.Fatal(err)
	}
	after, err := c.Apps(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("apps after restart %+v, before %+v", after, before)
	}
	for i := range before {
		b, a := before[i], after[i]
		if a.Name != b.Name || a.Auto || a.CPUCores != b.CPUCores || a.MemoryBytes != b.MemoryBytes ||
			a.Sigma != b.Sigma || a.Params != b.Params || a.Policy != b.Policy {
			t.Errorf("after restart %+v\nbefore          %+v", a, b)
		}
	}
	if after[1].Params != p || after[1].Policy != allocator.PolicyEscraPaper {
		t.Errorf("shop's parameters %+v policy %s, set %+v %s", after[1].Params, after[1].Policy, p, allocator.PolicyEscraPaper)
	}
}
