package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testPrefix names the containers and images this test creates (a shared
// engine: ESCRA_TEST_PREFIX keeps several runs apart).
func testPrefix() string {
	if p := os.Getenv("ESCRA_TEST_PREFIX"); p != "" {
		return p
	}
	return "escra-test-"
}

// bootedRoot is the cached Debian 12 root running systemd as PID 1 in a
// container of the host's engine, so the maintainer scripts meet a real
// systemd: deb-systemd-invoke starts and restarts, Type=notify, the
// watchdog. No network (--network none), only loopback.
type bootedRoot struct {
	t    *testing.T
	name string
}

func bootRoot(t *testing.T) *bootedRoot {
	t.Helper()
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		t.Skip("docker socket absent: run `make setup` (starts dockerd) to run the upgrade test under systemd")
	}
	out, err := exec.Command("../../debroot.sh", "--tarball").Output()
	if err != nil {
		t.Skipf("no cached Debian root: %v", err)
	}
	tarball := strings.TrimSpace(string(out))
	tag := fmt.Sprintf("%sdebroot:%d", testPrefix(), os.Getpid())
	name := fmt.Sprintf("%spkg-systemd-%d-%d", testPrefix(), os.Getpid(), time.Now().UnixNano()%1e6)
	if out, err := exec.Command("docker", "import", tarball, tag).CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	// systemd needs CAP_SYS_ADMIN for its mounts and the units' sandboxes,
	// and a writable cgroup tree (it stays inside the container's groups).
	// / is made shared first, as on a host: systemd does that itself when
	// the kernel starts it, but leaves a container manager's propagation
	// alone, and Docker's is private. A unit's credentials are mounted in
	// a child namespace of PID 1 and moved to /run/credentials/UNIT; with
	// private propagation the move never reaches PID 1, the unit finds the
	// empty root-only directory and cannot open $CREDENTIALS_DIRECTORY
	// (DynamicUser or not: systemd 252 in Debian 12).
	out, err = exec.Command("docker", "run", "-d", "--name", name, "--network", "none",
		"--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup",
		"-e", "container=docker", tag, "/bin/sh", "-c", "mount --make-rshared / && exec /lib/systemd/systemd").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run systemd: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := exec.Command("docker", "exec", name, "journalctl", "--no-pager", "-n", "60", "-u", "escrad", "-u", "escra-controller").CombinedOutput()
			t.Logf("journal of the booted root:\n%s", log)
		}
		exec.Command("docker", "rm", "-f", "-v", name).Run()
	})
	b := &bootedRoot{t: t, name: name}
	b.waitFor("systemd up", 30*time.Second, func() bool {
		out, _ := b.try("systemctl is-system-running")
		s := strings.TrimSpace(out)
		return s == "running" || s == "degraded"
	})
	return b
}

// try runs a shell script in the booted root.
func (b *bootedRoot) try(script string) (string, error) {
	out, err := exec.Command("docker", "exec", b.name, "/bin/sh", "-ec", script).CombinedOutput()
	return string(out), err
}

func (b *bootedRoot) sh(script string) string {
	b.t.Helper()
	out, err := b.try(script)
	if err != nil {
		b.t.Fatalf("in the booted root: %s: %v\n%s", script, err, out)
	}
	return out
}

func (b *bootedRoot) waitFor(what string, d time.Duration, ok func() bool) {
	b.t.Helper()
	for end := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		if ok() {
			return
		}
		if time.Now().After(end) {
			b.t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// mainPID is the unit's main process (0: none).
func (b *bootedRoot) mainPID(unit string) int {
	out, _ := b.try("systemctl show -P MainPID " + unit)
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	return n
}

// runningVersion waits until unit is active with a main process other
// than notPID that logged it runs version ver (both daemons log their
// version once started), and returns its pid. For escrad, a root
// process, it also checks the process runs the file now at /usr/bin
// (same inode: not an unlinked older binary).
func (b *bootedRoot) runningVersion(unit, ver string, notPID int) int {
	b.t.Helper()
	var pid int
	b.waitFor(unit+" active with a new main process running "+ver, 30*time.Second, func() bool {
		if out, _ := b.try("systemctl is-active " + unit); strings.TrimSpace(out) != "active" {
			return false
		}
		pid = b.mainPID(unit)
		if pid == 0 || pid == notPID {
			return false
		}
		out, _ := b.try(fmt.Sprintf("journalctl --no-pager -o cat _PID=%d", pid))
		return strings.Contains(out, "version="+ver+" ")
	})
	if unit == "escrad.service" {
		b.sh(fmt.Sprintf("[ \"$(stat -Lc %%i /proc/%d/exe)\" = \"$(stat -c %%i /usr/bin/escrad)\" ]", pid))
	}
	return pid
}

// upgradeUnderSystemd installs the previous packages into the booted root,
// upgrades to the new ones and purges, checking what an operator relies
// on: units enabled and started by the maintainer scripts, both services
// restarted onto the new binaries by the upgrade, a conffile the admin
// edited kept, the watchdog restarting a stuck escrad, and a purge that
// leaves neither processes nor files nor unit state.
func upgradeUnderSystemd(t *testing.T, oldDebs, newDebs []string, oldVer, newVer string) {
	b := bootRoot(t)
	b.sh("mkdir -p /tmp/old /tmp/new")
	for _, d := range oldDebs {
		if out, err := exec.Command("docker", "cp", d, b.name+":/tmp/old/").CombinedOutput(); err != nil {
			t.Fatalf("docker cp: %v\n%s", err, out)
		}
	}
	for _, d := range newDebs {
		if out, err := exec.Command("docker", "cp", d, b.name+":/tmp/new/").CombinedOutput(); err != nil {
			t.Fatalf("docker cp: %v\n%s", err, out)
		}
	}
	units := []string{"escrad.service", "escra-controller.service"}

	// Install the previous version. The shipped config wants certificates
	// that do not exist yet, so the start fails in ExecStartPre
	// (--check-config) with one line, not a crash loop of the daemon.
	b.sh("dpkg -i /tmp/old/escrad_*.deb /tmp/old/escra-controller_*.deb")
	for _, u := range units {
		if out, _ := b.try("systemctl is-enabled " + u); strings.TrimSpace(out) != "enabled" {
			t.Errorf("%s after install: is-enabled %q, want enabled", u, out)
		}
	}
	b.waitFor("escrad's ExecStartPre refusing the config without certificates", 20*time.Second, func() bool {
		out, _ := b.try("journalctl --no-pager -u escrad")
		return strings.Contains(out, "escrad: TLS: CA: open /etc/escra/ca.pem")
	})
	b.waitFor("escra-controller's ExecStartPre naming the missing CA (the unit's credential fallback)", 20*time.Second, func() bool {
		out, _ := b.try("journalctl --no-pager -u escra-controller")
		return strings.Contains(out, "escra-controller: TLS: CA: open /etc/escra/ca.pem")
	})
	// The start with the certificates escractl certs writes (keys 0600
	// root, docs/operator.md step 3): the unit's dynamic user gets them
	// through LoadCredential=, and the admin API answers with TLS.
	controllerWithTLS(b, oldVer)
	// The admin's edit of two conffiles: plain TCP on loopback.
	b.sh(`sed -i 's/^ESCRAD_ARGS=.*/ESCRAD_ARGS="--insecure --docker-host unix:\/\/\/run\/no-engine.sock"/' /etc/escra/escrad.env
sed -i 's/^ESCRA_CONTROLLER_ARGS=.*/ESCRA_CONTROLLER_ARGS="--insecure"/' /etc/escra/escra-controller.env
systemctl reset-failed escrad escra-controller || true
systemctl restart escra-controller escrad`)
	oldPID := map[string]int{}
	for _, u := range units {
		oldPID[u] = b.runningVersion(u, oldVer, 0)
	}
	if v := b.sh("escrad --version"); v != "escrad "+oldVer+"\n" {
		t.Fatalf("installed escrad --version %q", v)
	}
	envBefore := b.sh("cat /etc/escra/escrad.env /etc/escra/escra-controller.env")

	// Upgrade: both services restarted onto the new binaries.
	b.sh("dpkg -i /tmp/new/escrad_*.deb /tmp/new/escra-controller_*.deb")
	newPID := map[string]int{}
	for _, u := range units {
		newPID[u] = b.runningVersion(u, newVer, oldPID[u])
	}
	if v := b.sh("escrad --version; escra-controller --version"); v != "escrad "+newVer+"\nescra-controller "+newVer+"\n" {
		t.Fatalf("after the upgrade: %q", v)
	}
	if after := b.sh("cat /etc/escra/escrad.env /etc/escra/escra-controller.env"); after != envBefore {
		t.Errorf("the upgrade changed the edited conffiles:\nbefore %q\nafter  %q", envBefore, after)
	}
	if out := b.sh("ls /etc/escra/"); strings.Contains(out, ".dpkg-") {
		t.Errorf("the upgrade left conffile copies: %s", out)
	}

	// A stuck escrad (stopped: no loop turns, no watchdog ping) is killed
	// by systemd's watchdog and restarted. A short WatchdogSec here keeps
	// the test quick; the shipped unit has 20 s.
	b.sh(`mkdir -p /etc/systemd/system/escrad.service.d
printf '[Service]\nWatchdogSec=3s\n' >/etc/systemd/system/escrad.service.d/test.conf
systemctl daemon-reload
systemctl restart escrad`)
	stuck := b.runningVersion("escrad.service", newVer, newPID["escrad.service"])
	time.Sleep(4 * time.Second) // several watchdog intervals while healthy: no restart
	if p := b.mainPID("escrad.service"); p != stuck {
		t.Fatalf("a healthy escrad was restarted (main pid %d -> %d): the watchdog is not petted", stuck, p)
	}
	b.sh(fmt.Sprintf("kill -STOP %d", stuck))
	b.runningVersion("escrad.service", newVer, stuck)
	if out := b.sh("journalctl --no-pager -u escrad -o cat"); !strings.Contains(out, "Watchdog timeout") {
		t.Errorf("escrad restarted, but not by the watchdog:\n%s", out)
	}
	b.sh("rm -r /etc/systemd/system/escrad.service.d; systemctl daemon-reload")

	// Purge: stopped, files, conffiles and unit state gone.
	b.sh("dpkg --purge escrad escra-controller")
	for _, u := range units {
		if out, _ := b.try("systemctl is-active " + u); strings.TrimSpace(out) == "active" {
			t.Errorf("%s still active after purge", u)
		}
	}
	if out, _ := b.try("cat /proc/[0-9]*/comm 2>/dev/null | grep -x -e escrad -e escra-controller || true"); strings.TrimSpace(out) != "" {
		t.Errorf("processes left after purge: %q", out)
	}
	if out, _ := b.try("ls -d /etc/escra /usr/bin/escrad /lib/systemd/system/escrad.service /etc/systemd/system/escrad.service /etc/systemd/system/multi-user.target.wants/escrad.service /etc/systemd/system/multi-user.target.wants/escra-controller.service /var/lib/systemd/deb-systemd-helper-enabled/escrad.service.dsh-also 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("left after purge:\n%s", out)
	}
}

// controllerWithTLS writes the certificates as docs/operator.md step 3
// does, restarts escra-controller and checks that it runs as its dynamic
// user (not root), with the key readable only by root in /etc/escra, and
// that its admin API answers escractl over mutual TLS on 127.0.0.1:7472.
// The certificates are removed afterwards (the test goes on --insecure).
func controllerWithTLS(b *bootedRoot, ver string) {
	b.t.Helper()
	b.sh(`escractl certs --dir /etc/escra --hosts "$(hostname)"
[ "$(stat -c '%a %U' /etc/escra/controller-key.pem)" = "600 root" ]
systemctl reset-failed escra-controller || true
systemctl restart escra-controller`)
	pid := b.runningVersion("escra-controller.service", ver, 0)
	if u := strings.TrimSpace(b.sh(fmt.Sprintf("stat -c %%U /proc/%d", pid))); u == "root" || u == "" {
		b.t.Errorf("escra-controller runs as %q, want its dynamic user", u)
	}
	var out string
	b.waitFor("escractl version over TLS from the controller unit's admin port", 20*time.Second, func() bool {
		var err error
		out, err = b.try("escractl --controller https://127.0.0.1:7472 --certs /etc/escra version")
		return err == nil && strings.Contains(out, ver)
	})
	if log := b.sh(fmt.Sprintf("journalctl --no-pager -o cat _PID=%d", pid)); !strings.Contains(log, "tls=true") {
		b.t.Errorf("the controller's ready line does not say tls=true:\n%s", log)
	}
	b.t.Logf("escra-controller with TLS under systemd: pid %d; escractl version: %s", pid, strings.TrimSpace(out))
	b.sh("rm -f /etc/escra/*.pem")
}
