// Tests of the shell scripts in this directory, against the real Docker
// engine binaries.
package scripts_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/procstat"
)

const (
	hostsName = "escra-hosts-test" // /run/NAME, /var/lib/NAME
	hostsTag  = "escra-t-"         // cgroup parent /escra-t-hN
)

func hostsSh(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("./hosts.sh", args...)
	cmd.Env = append(os.Environ(), "ESCRA_HOSTS_NAME="+hostsName, "ESCRA_HOSTS_TAG="+hostsTag,
		"ESCRA_HOSTS_METRICS_BASE=0", "ESCRA_CONTROLLER_ADDR=127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hosts.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type proc struct{ pid, start string }

// recorded reads the script's pid file: name -> pid and start time.
func recorded(t *testing.T) map[string]proc {
	t.Helper()
	m := map[string]proc{}
	f, err := os.Open("/run/" + hostsName + "/pids")
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 {
			m[f[0]] = proc{f[1], f[2]}
		}
	}
	return m
}

func running(p proc) bool {
	pid, err := strconv.Atoi(p.pid)
	if err != nil {
		return false
	}
	st, err := procstat.Read(pid)
	return err == nil && strconv.FormatUint(st.StartTime, 10) == p.start && !st.Zombie()
}

func engine(t *testing.T, n int) *client.Client {
	cli, err := client.New(client.WithHost(fmt.Sprintf("unix:///run/%s/h%d/docker.sock", hostsName, n)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// leftovers lists what hosts.sh engines run under name (their dirs, mounts
// and processes) and tag (their cgroup parents) could leave behind.
func leftovers(name, tag string) []string {
	var left []string
	for _, d := range []string{"/run/" + name, "/var/lib/" + name} {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, name) {
				left = append(left, "mount: "+l)
			}
		}
	}
	// Processes of the engines (dockerd, containerd, shims) name their dirs.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/run/"+name+"/") {
			left = append(left, "process: "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), tag+"h") {
			left = append(left, "cgroup: "+p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 7 {
			return filepath.SkipDir
		}
		return nil
	})
	return left
}

// TestHostsUpDown: two engines beside the main one, a container on each,
// idempotent up, recovery after kill -9, and a down that leaves nothing.
func TestHostsUpDown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (starts dockerd)")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed: run make setup")
	}
	if _, err := os.Stat("/run/" + hostsName); err == nil {
		hostsSh(t, "down") // a previous run that died
	}
	t.Cleanup(func() {
		exec.Command("./hosts.sh", "down").Run()
	})
	start := time.Now()
	hostsSh(t, "up", "2")
	procs := recorded(t)
	for _, name := range []string{"dockerd-h1", "dockerd-h2"} {
		if !running(procs[name]) {
			t.Fatalf("%s not running: %v", name, procs)
		}
	}
	_, haveEscrad := os.Stat("../bin/escrad")
	if haveEscrad == nil && !running(procs["escrad-h1"]) {
		t.Fatalf("bin/escrad exists but escrad-h1 does not run: %v", procs)
	}

	// A container on each engine, in that engine's cgroup parent.
	ctx := context.Background()
	var pids []int
	for n := 1; n <= 2; n++ {
		cli := engine(t, n)
		img := dockertest.WorkloadImage(t, cli)
		cr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: img, Labels: map[string]string{"escra.app": "hosts-test"}},
			HostConfig: &container.HostConfig{NetworkMode: "none"}, Name: fmt.Sprintf("spin-h%d", n)})
		if err != nil {
			t.Fatalf("h%d: create: %v", n, err)
		}
		if _, err := cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("h%d: start: %v", n, err)
		}
		info, err := dockertest.Inspect(ctx, cli, cr.ID)
		if err != nil || !info.State.Running {
			t.Fatalf("h%d: container not running: %v", n, err)
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", info.State.Pid))
		if want := fmt.Sprintf(":cpu:/%sh%d/%s", hostsTag, n, cr.ID); !strings.Contains(string(cg), want) ||
			!strings.Contains(string(cg), fmt.Sprintf(":memory:/%sh%d/", hostsTag, n)) {
			t.Fatalf("h%d: container cgroups do not sit under /%sh%d:\n%s", n, hostsTag, n, cg)
		}
		// The engines are separate: h1 does not see h2's container.
		list, _ := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
		if len(list.Items) != 1 {
			t.Fatalf("h%d lists %d containers, want its own 1", n, len(list.Items))
		}
		pids = append(pids, info.State.Pid)
	}

	// A second up changes nothing.
	hostsSh(t, "up", "2")
	if again := recorded(t); again["dockerd-h1"] != procs["dockerd-h1"] || again["dockerd-h2"] != procs["dockerd-h2"] {
		t.Fatalf("second up restarted engines: %v -> %v", procs, again)
	}

	// After a crash (kill -9 of dockerd h1), up brings h1 back.
	pid, _ := strconv.Atoi(procs["dockerd-h1"].pid)
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
	for i := 0; i < 100 && running(procs["dockerd-h1"]); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	hostsSh(t, "up", "2")
	after := recorded(t)
	if after["dockerd-h1"] == procs["dockerd-h1"] || !running(after["dockerd-h1"]) {
		t.Fatalf("h1 not restarted after kill -9: %v", after)
	}
	if _, err := engine(t, 1).Ping(ctx, client.PingOptions{}); err != nil {
		t.Fatalf("h1 does not answer after the restart: %v", err)
	}

	hostsSh(t, "down")
	for name, p := range after {
		if running(p) {
			t.Errorf("%s (pid %s) still runs after down", name, p.pid)
		}
	}
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("container process %d still runs after down", pid)
		}
	}
	if left := leftovers(hostsName, hostsTag); len(left) > 0 {
		t.Errorf("down left behind:\n%s", strings.Join(left, "\n"))
	}
	t.Logf("up, two containers, crash recovery and down in %s", time.Since(start).Round(time.Millisecond))
}
