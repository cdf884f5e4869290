package scripts_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/dockertest"
)

// The multi-host acceptance test: three Docker engines on this machine
// (scripts/hosts.sh), a real escrad per engine, the real controller and
// escractl. One app spread over the three shares one pool (Escra §IV-A,
// §IV-D): a CPU burst takes unallocated CPU within a second, a memory-growing
// container is rescued with memory reclaimed on another host, and delete
// leaves nothing behind.

const (
	e2eName = "escra-e2e"  // /run/NAME, /var/lib/NAME
	e2eTag  = "escra-e2e-" // cgroup parents /escra-e2e-hN
	e2eApp  = "e2e"
	mib     = int64(1) << 20
)

func e2eHosts(args ...string) ([]byte, error) {
	cmd := exec.Command("./hosts.sh", args...)
	cmd.Env = append(os.Environ(), "ESCRA_HOSTS_NAME="+e2eName, "ESCRA_HOSTS_TAG="+e2eTag, "ESCRA_HOSTS_METRICS_BASE=0")
	return cmd.CombinedOutput()
}

func freeAddr(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemon starts one of our binaries and stops it (by its pid) at cleanup.
func daemon(t *testing.T, logDir, name string, argv ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { stop(cmd); f.Close() })
	return cmd
}

func stop(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

type cli struct {
	t    *testing.T
	bin  string
	addr string
}

func (c cli) run(args ...string) (string, string, int) {
	cmd := exec.Command(c.bin, append([]string{"--controller", c.addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("escractl: %v", err)
	}
	return out.String(), errb.String(), code
}

func TestE2EDeployAcrossThreeHosts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (starts dockerd)")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed: run make setup")
	}
	if _, err := os.Stat("/run/" + e2eName); err == nil {
		e2eHosts("down") // a previous run that died
	}
	bin := t.TempDir()
	if err := dockertest.BuildBinaries(bin, "./controller/cmd/escra-controller", "./controller/cmd/escractl", "./daemon/cmd/escrad"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := e2eHosts("down"); err != nil {
			t.Errorf("hosts.sh down: %v\n%s", err, out)
		}
	})
	if out, err := e2eHosts("up", "3", "--no-escrad"); err != nil {
		t.Fatalf("hosts.sh up 3: %v\n%s", err, out)
	}
	ctx := context.Background()
	main := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, main)
	if out, err := e2eHosts("load", img); err != nil {
		t.Fatalf("hosts.sh load: %v\n%s", err, out)
	}
	engines := map[string]*client.Client{}
	for n := 1; n <= 3; n++ {
		engines[fmt.Sprintf("h%d", n)] = dockertest.Client(t, fmt.Sprintf("unix:///run/%s/h%d/docker.sock", e2eName, n))
	}

	logs := t.TempDir()
	tcp, udp, admin := freeAddr(t, "tcp"), freeAddr(t, "udp"), freeAddr(t, "tcp")
	ctl := daemon(t, logs, "controller", filepath.Join(bin, "escra-controller"), "--insecure", "--listen", tcp,
		"--telemetry-listen", udp, "--admin-listen", admin, "--reclaim-every", "1s", "--state-dir", t.TempDir())
	var escrads []*exec.Cmd
	for n := 1; n <= 3; n++ {
		escrads = append(escrads, daemon(t, logs, fmt.Sprintf("escrad-h%d", n), filepath.Join(bin, "escrad"), "--insecure",
			"--docker-host", fmt.Sprintf("unix:///run/%s/h%d/docker.sock", e2eName, n), "--host-id", fmt.Sprintf("h%d", n),
			"--controller", tcp, "--backend", "cgroupfs", "--idle-parent-check=false"))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"controller", "escrad-h1", "escrad-h2", "escrad-h3"} {
				b, _ := os.ReadFile(filepath.Join(logs, n+".log"))
				t.Logf("--- %s log (tail) ---\n%s", n, tailLines(string(b), 30))
			}
		}
	})
	ac, err := adminclient.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "3 hosts connected", func() bool {
		hs, err := ac.Hosts(ctx)
		return err == nil && len(hs) == 3
	})
	ctlCLI := cli{t, filepath.Join(bin, "escractl"), "http://" + admin}

	// An image no engine has: apply fails in one line and leaves nothing.
	bad := writeFile(t, "bad.yaml", fmt.Sprintf("name: e2e-bad\ncpu: 1\nmemory: 300MiB\ncontainers:\n"+
		"- {name: a, image: %q, command: [/bin/spin, -idle], replicas: 2}\n- {name: b, image: escra-test/none:1}\n", img))
	if _, stderr, code := ctlCLI.run("apply", "-f", bad); code != 1 || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, "escra-test/none:1") {
		t.Fatalf("apply with a missing image: exit %d, stderr %q", code, stderr)
	}
	for h, e := range engines {
		if l, _ := e.ContainerList(ctx, client.ContainerListOptions{All: true}); len(l.Items) != 0 {
			t.Fatalf("failed apply left %d containers on %s", len(l.Items), h)
		}
	}
	if apps, _ := ac.Apps(ctx); len(apps) != 0 {
		t.Fatalf("failed apply left apps %+v", apps)
	}

	// The app: 1.2 cores and 600 MiB over three hosts, σ = 0.1, so each
	// container starts with 0.4 cores and 180 MiB (eq. 2).
	spec := writeFile(t, "e2e.yaml", fmt.Sprintf(`name: e2e
cpu: 1.2
memory: 600MiB
sigma: 0.1
containers:
  - name: burst
    image: %[1]q
    command: [/bin/spin, -duty, "0.05"]
  - name: hog
    image: %[1]q
    command: [/bin/memhog, -wait-usr1, -mib, "300", -step-mib, "8", -pause, 50ms, -hold, 10m]
    host: h2
  - name: idle
    image: %[1]q
    command: [/bin/spin, -duty, "0.05"]
`, img))
	t0 := time.Now()
	stdout, stderr, code := ctlCLI.run("apply", "-f", spec)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s%s", code, stdout, stderr)
	}
	t.Logf("apply took %v: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(stdout))
	members := func() map[string]adminclient.Container {
		cs, err := ac.Containers(ctx, e2eApp)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]adminclient.Container{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	m := members()
	wantHost := map[string]string{"e2e-burst": "h1", "e2e-hog": "h2", "e2e-idle": "h3"}
	for name, h := range wantHost {
		c, ok := m[name]
		if !ok || c.HostID != h {
			t.Fatalf("%s: registered %v on %q, want on %s (placement: fewest of the app, host constraint)", name, ok, c.HostID, h)
		}
		info, err := dockertest.Inspect(ctx, engines[h], c.ContainerID)
		if err != nil || !info.State.Running || info.Config.Labels["escra.app"] != e2eApp {
			t.Fatalf("%s on %s: not running with label escra.app=%s: %v", name, h, e2eApp, err)
		}
		// Started with limits (the controller may have moved them since).
		if info.HostConfig.Memory <= 0 || info.HostConfig.CPUQuota <= 0 {
			t.Errorf("%s runs without limits: memory %d, quota %d", name, info.HostConfig.Memory, info.HostConfig.CPUQuota)
		}
	}

	// CPU: idle containers give their quota back to the pool (κ), then a
	// burst in one takes unallocated CPU within a second (Υ).
	waitFor(t, 15*time.Second, "idle quotas shrink", func() bool {
		return members()["e2e-burst"].CPULimitCores() < 0.2
	})
	before := members()["e2e-burst"]
	apps, _ := ac.Apps(ctx)
	unallocBefore := apps[0].CPUUnallocatedCores
	burst := exec.Command("docker", "-H", fmt.Sprintf("unix:///run/%s/h1/docker.sock", e2eName), "exec",
		before.ContainerID, "/bin/spin", "-threads", "2", "-for", "4s")
	if err := burst.Start(); err != nil {
		t.Fatal(err)
	}
	defer burst.Wait()
	burstAt := time.Now()
	var rose time.Duration
	for time.Since(burstAt) < 5*time.Second {
		if c := members()["e2e-burst"]; c.CPUQuotaUs > before.CPUQuotaUs*2 && c.CPUQuotaUs > 20000 {
			rose = time.Since(burstAt)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := members()["e2e-burst"]
	apps, _ = ac.Apps(ctx)
	t.Logf("burst: quota %d -> %d us within %v; unallocated %.2f -> %.2f cores", before.CPUQuotaUs, after.CPUQuotaUs,
		rose.Round(time.Millisecond), unallocBefore, apps[0].CPUUnallocatedCores)
	// docker exec itself takes some 100 ms to start the process.
	if rose == 0 || rose > 1500*time.Millisecond {
		t.Errorf("burst quota did not rise within a second of the burst (rose after %v)", rose)
	}
	// The burst's quota came from the pool: the app stays within Ω.
	if apps[0].CPUAllocatedCores > apps[0].CPUCores+1e-6 || apps[0].CPUUnallocatedCores < 0 {
		t.Errorf("app over its global CPU limit: %.3f of %.3f cores allocated", apps[0].CPUAllocatedCores, apps[0].CPUCores)
	}

	// Memory: the hog grows to 300 MiB on h2 from its 180 MiB; the 60 MiB
	// withheld (σ) are not enough, so memory is reclaimed on h1 and h3.
	hog := members()["e2e-hog"]
	if err := dockertest.StartHog(ctx, engines["h2"], hog.ContainerID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := members()["e2e-hog"]
		if c.MemoryUsageBytes >= 290*mib && c.OOMGrants > 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, c := range members() {
				t.Logf("%+v", c)
			}
			t.Fatalf("hog not rescued to 300 MiB within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	m = members()
	info, err := dockertest.Inspect(ctx, engines["h2"], hog.ContainerID)
	if err != nil || !info.State.Running || info.State.OOMKilled {
		t.Fatalf("hog not running after its rescue (oom killed: %v): %v", info.State != nil && info.State.OOMKilled, err)
	}
	reclaimed := false
	for _, n := range []string{"e2e-burst", "e2e-idle"} {
		t.Logf("%s on %s: memory limit %d MiB (bootstrap 180)", n, m[n].HostID, m[n].MemoryLimitBytes/mib)
		reclaimed = reclaimed || m[n].MemoryLimitBytes < 180*mib
	}
	t.Logf("hog on h2: limit %d MiB, usage %d MiB, %d OOM grants, %d denials", m["e2e-hog"].MemoryLimitBytes/mib,
		m["e2e-hog"].MemoryUsageBytes/mib, m["e2e-hog"].OOMGrants, m["e2e-hog"].OOMDenials)
	if !reclaimed || m["e2e-hog"].MemoryLimitBytes <= 240*mib {
		t.Errorf("hog rescued without memory reclaimed on another host")
	}
	burst.Wait()

	// The Watcher path: a container started by hand with the label joins.
	byHand, err := dockertest.Start(ctx, engines["h3"], dockertest.Spec{Name: "by-hand", Image: img,
		Cmd: []string{"-idle"}, Labels: map[string]string{"escra.app": e2eApp},
		Resources: container.Resources{Memory: 32 * mib, CPUQuota: 5000, CPUPeriod: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a labelled container started by hand joins the app", func() bool {
		c, ok := members()["by-hand"]
		return ok && c.ContainerID == byHand && c.HostID == "h3"
	})

	// Delete: nothing of the app on any engine, and the app is gone.
	if out, stderr, code := ctlCLI.run("delete", e2eApp); code != 0 {
		t.Fatalf("delete: exit %d: %s%s", code, out, stderr)
	}
	for h, e := range engines {
		if l, _ := e.ContainerList(ctx, client.ContainerListOptions{All: true}); len(l.Items) != 0 {
			t.Errorf("delete left %d containers on %s", len(l.Items), h)
		}
	}
	if apps, _ := ac.Apps(ctx); len(apps) != 0 {
		t.Errorf("delete left apps %+v", apps)
	}
	if _, stderr, code := ctlCLI.run("delete", e2eApp); code != 1 || stderr != "escractl: unknown app \"e2e\"\n" {
		t.Errorf("delete of an unknown app: exit %d, %q", code, stderr)
	}

	// Tear down and look for anything left behind.
	for _, e := range escrads {
		stop(e)
	}
	stop(ctl)
	if out, err := e2eHosts("down"); err != nil {
		t.Fatalf("hosts.sh down: %v\n%s", err, out)
	}
	if left := leftovers(e2eName, e2eTag); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
	for _, c := range append(escrads, ctl) {
		if c.ProcessState == nil {
			t.Errorf("%s still runs", c.Path)
		}
	}
}

func writeFile(t *testing.T, name, body string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
