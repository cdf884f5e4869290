package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/internal/simdaemon"
	"github.com/escra-dev/escra/controller/server"
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
		"--admin-listen", "127.0.0.1:0", "--apps", apps, "--reclaim-every", "0")
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
