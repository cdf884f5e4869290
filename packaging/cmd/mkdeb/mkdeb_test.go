package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3": "1.2.3", "0.1.0": "0.1.0", "1a2b3c4-dirty": "0.0.0~1a2b3c4.dirty", "dev": "0.0.0~dev",
		"v0.3.0-4-g1a2b3c4": "0.3.0+4.g1a2b3c4", "v0.3.0-4-g1a2b3c4-dirty": "0.3.0+4.g1a2b3c4.dirty",
		"0.3.0~7.g1a2b3c4": "0.3.0~7.g1a2b3c4", "0.3.0+2.g1a2b3c4.dirty": "0.3.0+2.g1a2b3c4.dirty",
		"": "0.0.0~dev", "a b": "0.0.0~a.b",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// buildBinaries builds the three commands with a known version, as make build does.
func buildBinaries(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	for name, pkg := range map[string]string{
		"escrad": "./daemon/cmd/escrad", "escra-controller": "./controller/cmd/escra-controller", "escractl": "./controller/cmd/escractl",
		"escra-gateway": "./controller/cmd/escra-gateway",
	} {
		cmd := exec.Command("go", "build", "-trimpath",
			"-ldflags", "-X github.com/escra-dev/escra/internal/version.Version="+version,
			"-o", filepath.Join(dir, name), pkg)
		cmd.Dir = "../../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPackages(t *testing.T) {
	const version = "0.9.1"
	bin := buildBinaries(t, version)
	out := t.TempDir()
	debs, err := build(options{Version: version, Bin: bin, Root: "../../..", Out: out})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"escrad_0.9.1_amd64.deb", "escra-controller_0.9.1_amd64.deb", "escra-gateway_0.9.1_amd64.deb", "escra-dkms_0.9.1_all.deb"}
	if len(debs) != len(want) {
		t.Fatalf("built %v", debs)
	}
	for i, d := range debs {
		if filepath.Base(d) != want[i] {
			t.Fatalf("package %d is %s, want %s", i, filepath.Base(d), want[i])
		}
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb missing")
	}
	// Contents and control data, as dpkg sees them.
	ctl := sh(t, "dpkg-deb", "-c", debs[0])
	for _, f := range []string{"./usr/bin/escrad", "./lib/systemd/system/escrad.service", "./etc/escra/escrad.yaml"} {
		if !strings.Contains(ctl, f) {
			t.Errorf("escrad package lacks %s:\n%s", f, ctl)
		}
	}
	if c := sh(t, "dpkg-deb", "-f", debs[0], "Package", "Version", "Architecture"); c != "Package: escrad\nVersion: 0.9.1\nArchitecture: amd64\n" {
		t.Errorf("escrad control: %q", c)
	}
	conffiles := sh(t, "sh", "-c", "dpkg-deb --ctrl-tarfile "+debs[0]+" | tar -xOf - ./conffiles")
	if !strings.Contains(conffiles, "/etc/escra/escrad.yaml") {
		t.Errorf("escrad.yaml is not a conffile: %q", conffiles)
	}
	gw, dkms := debs[2], debs[3]
	gwc := sh(t, "dpkg-deb", "-c", gw)
	for _, f := range []string{"./usr/bin/escra-gateway", "./lib/systemd/system/escra-gateway.service", "./etc/escra/escra-gateway.env"} {
		if !strings.Contains(gwc, f) {
			t.Errorf("escra-gateway package lacks %s:\n%s", f, gwc)
		}
	}
	if c := sh(t, "sh", "-c", "dpkg-deb --ctrl-tarfile "+gw+" | tar -xOf - ./conffiles"); !strings.Contains(c, "/etc/escra/escra-gateway.env") {
		t.Errorf("escra-gateway.env is not a conffile: %q", c)
	}
	if d := sh(t, "dpkg-deb", "-f", dkms, "Depends"); !strings.Contains(d, "dkms") {
		t.Errorf("escra-dkms must depend on dkms: %q", d)
	}
	dk := sh(t, "dpkg-deb", "-c", dkms)
	for _, f := range []string{"./usr/src/escra-0.9.1/dkms.conf", "./usr/src/escra-0.9.1/escra.c", "./usr/src/escra-0.9.1/Kbuild"} {
		if !strings.Contains(dk, f) {
			t.Errorf("escra-dkms lacks %s:\n%s", f, dk)
		}
	}

	// The shipped escrad.yaml is one escrad accepts (it refuses unknown keys):
	// with it, escrad starts and waits for its (absent) engine.
	cmd := exec.Command(filepath.Join(bin, "escrad"), "--config", "../../etc/escrad.yaml", "--insecure",
		"--docker-host", "unix://"+filepath.Join(t.TempDir(), "none.sock"), "--metrics-listen", "")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("escrad exited with the shipped config: %v\n%s", err, log.String())
	case <-time.After(1500 * time.Millisecond):
		cmd.Process.Kill()
		<-done
	}

	installInDebianRoot(t, debs, version)

	// The previous release, to upgrade from under a running systemd.
	const oldVersion = "0.9.0"
	oldDebs, err := build(options{Version: oldVersion, Bin: buildBinaries(t, oldVersion), Root: "../../..", Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("upgrade", func(t *testing.T) { upgradeUnderSystemd(t, oldDebs[:2], debs[:2], oldVersion, version) })
	t.Run("dkms", func(t *testing.T) { dkmsAgainstEscraHeaders(t, dkms, version) })
}

// installInDebianRoot installs the packages into a debootstrapped Debian 12
// root and checks them there: files, systemd-analyze verify on the units,
// and that the binaries run. A private mount namespace (unshare) holds the
// chroot's /proc, so nothing stays mounted after the test.
func installInDebianRoot(t *testing.T, debs []string, version string) {
	if os.Geteuid() != 0 {
		t.Skip("installing into a Debian root needs root")
	}
	for _, tool := range []string{"debootstrap", "unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: scripts/setup.sh installs it", tool)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("../../debroot.sh", root).CombinedOutput(); err != nil {
		log, _ := os.ReadFile("/var/cache/escra/debootstrap/debootstrap.log")
		if strings.Contains(string(log), "Failed getting") || strings.Contains(string(log), "Temporary failure resolving") ||
			strings.Contains(string(log), "Couldn't download") {
			t.Skipf("debootstrap cannot reach Debian's mirror, so the packages were not installed into a root:\n%s", out)
		}
		t.Fatalf("debroot.sh: %v\n%s", err, out)
	}
	for _, d := range debs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "tmp", filepath.Base(d)), b, 0o644)
	}
	chroot := func(script string) (string, error) {
		cmd := exec.Command("unshare", "--mount", "--fork", "chroot", root, "/bin/sh", "-ec",
			"mount -t proc proc /proc\n"+script)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// escra-dkms depends on dkms, which a minimal root lacks: unpack only.
	if out, err := chroot("dpkg -i /tmp/escrad_*.deb /tmp/escra-controller_*.deb /tmp/escra-gateway_*.deb\ndpkg --unpack /tmp/escra-dkms_*.deb"); err != nil {
		t.Fatalf("dpkg in the Debian root: %v\n%s", err, out)
	}
	for _, f := range []string{
		"usr/bin/escrad", "usr/bin/escra-controller", "usr/bin/escractl",
		"lib/systemd/system/escrad.service", "lib/systemd/system/escra-controller.service",
		"usr/bin/escra-gateway", "lib/systemd/system/escra-gateway.service", "etc/escra/escra-gateway.env",
		"usr/share/doc/escra-gateway/examples/functions.json",
		"etc/escra/escrad.yaml", "etc/escra/escrad.env", "etc/escra/escra-controller.env",
		"usr/share/doc/escrad/operator.md", "usr/src/escra-" + version + "/dkms.conf",
		"usr/share/doc/escrad/copyright", "usr/share/doc/escra-controller/copyright",
		"usr/share/escra/prometheus/escra-alerts.yml", "usr/share/escra/grafana/escra-dashboard.json",
	} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	// Enabled although no systemd runs in the chroot (an image build):
	// deb-systemd-helper wrote the links.
	for _, u := range []string{"escrad.service", "escra-controller.service", "escra-gateway.service"} {
		if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants", u)); err != nil {
			t.Errorf("%s not enabled by an install in a chroot: %v", u, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "usr/src/escra-"+version+"/dkms.conf")); !strings.Contains(string(b), `PACKAGE_VERSION="`+version+`"`) {
		t.Errorf("dkms.conf does not carry the version:\n%s", b)
	}
	out, err := chroot("escrad --version; escra-controller --version; escractl --version; escra-gateway -version")
	if err != nil || out != "escrad "+version+"\nescra-controller "+version+"\nescractl "+version+"\nescra-gateway "+version+"\n" {
		t.Fatalf("--version in the root: %v\n%q", err, out)
	}
	out, err = chroot("systemd-analyze verify /lib/systemd/system/escrad.service /lib/systemd/system/escra-controller.service /lib/systemd/system/escra-gateway.service")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Hardening must not regress: systemd's exposure score (0 best, 10 worst).
	for unit, most := range map[string]float64{"escra-controller.service": 2.0, "escra-gateway.service": 2.0, "escrad.service": 4.0} {
		out, err := chroot("systemd-analyze security --offline=yes --no-pager /lib/systemd/system/" + unit + " | tail -1")
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", unit, err, out)
		}
		if score, _ := strconv.ParseFloat(m[1], 64); score > most {
			t.Errorf("%s exposure %.1f, want at most %.1f (docs/operator.md, Service hardening)", unit, score, most)
		} else {
			t.Logf("%s: systemd exposure %.1f", unit, score)
		}
	}
	// The check itself must be able to fail: a unit with a missing binary.
	if out, err := chroot("printf '[Service]\\nExecStart=/usr/bin/escra-nope\\n' >/tmp/bad.service\nsystemd-analyze verify /tmp/bad.service"); err == nil {
		t.Fatalf("systemd-analyze verify accepted a unit with a missing binary:\n%s", out)
	}
	// Purge removes everything, conffiles included.
	if out, err := chroot("dpkg --purge escrad escra-controller escra-gateway escra-dkms"); err != nil {
		t.Fatalf("dpkg --purge: %v\n%s", err, out)
	}
	for _, f := range []string{"usr/bin/escrad", "etc/escra/escrad.yaml", "lib/systemd/system/escrad.service", "usr/src/escra-" + version} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			t.Errorf("after purge %s is still there", f)
		}
	}
}
