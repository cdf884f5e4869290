package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dkmsAgainstEscraHeaders installs escra-dkms and then the Escra kernel
// packages (make kernel-deb) into a Debian 12 root with dkms and a
// compiler, as an operator would on a host: the kernel image's postinst
// runs /etc/kernel/postinst.d/dkms, which must build and install escra.ko
// for that kernel from the headers package, with the hooks (not the stub
// a kernel without CONFIG_ESCRA_HOOKS gets).
func dkmsAgainstEscraHeaders(t *testing.T, dkmsDeb, version string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, given := os.LookupEnv("ESCRA_KERNEL_DEBS")
	if !given {
		dir = "../../../dist/kernel/6.1-vm"
	}
	headers, _ := filepath.Glob(filepath.Join(dir, "linux-headers-*-escra_*.deb"))
	images, _ := filepath.Glob(filepath.Join(dir, "linux-image-*-escra_*.deb"))
	if len(headers) != 1 || len(images) != 1 {
		if given { // make test, or an operator, pointed at packages to test
			t.Fatalf("ESCRA_KERNEL_DEBS=%s: want one linux-image-*-escra and one linux-headers-*-escra package, found %d and %d", dir, len(images), len(headers))
		}
		t.Skipf("no Escra kernel packages in %s (make kernel-deb builds them; make test runs this with them)", dir)
	}
	m := regexp.MustCompile(`^linux-image-(.+-escra)_`).FindStringSubmatch(filepath.Base(images[0]))
	if m == nil {
		t.Fatalf("cannot read the kernel release from %s", images[0])
	}
	kver := m[1]
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("../../debroot.sh", "--dkms", root).CombinedOutput(); err != nil {
		t.Fatalf("debroot.sh --dkms: %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "tmp/k"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dkmsDeb, headers[0], images[0]} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "tmp/k", filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chroot := func(script string) (string, error) {
		cmd := exec.Command("unshare", "--mount", "--fork", "chroot", root, "/bin/sh", "-ec",
			"mount -t proc proc /proc\n"+script)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := chroot("dpkg -i /tmp/k/escra-dkms_*.deb"); err != nil {
		t.Fatalf("installing escra-dkms: %v\n%s", err, out)
	}
	makeLog := func() string {
		log, _ := chroot("cat /var/lib/dkms/escra/" + version + "/build/make.log 2>/dev/null | tail -30 || true")
		return log
	}
	out, err := chroot("dpkg -i /tmp/k/linux-headers-*.deb /tmp/k/linux-image-*.deb")
	if err != nil {
		t.Fatalf("installing the Escra kernel packages: %v\n%s\nmake.log:\n%s", err, out, makeLog())
	}
	status, _ := chroot("dkms status")
	ko := filepath.Join(root, "lib/modules", kver, "updates/dkms/escra.ko")
	b, err := os.ReadFile(ko)
	if err != nil {
		t.Fatalf("escra.ko not built for %s by the kernel's postinst: %v\ndpkg:\n%s\ndkms status: %s\nmake.log:\n%s", kver, err, out, status, makeLog())
	}
	if !strings.Contains(status, "escra/"+version+", "+kver) || !strings.Contains(status, "installed") {
		t.Errorf("dkms status: %q", status)
	}
	if !bytes.Contains(b, []byte("vermagic="+kver+" ")) {
		t.Errorf("escra.ko is not built for %s (vermagic)", kver)
	}
	// Built with the hooks: it calls the patched kernel's registration
	// API. The stub for other kernels has no such reference.
	if !bytes.Contains(b, []byte("escra_register_hooks")) {
		t.Errorf("escra.ko was built as the stub: the headers lack CONFIG_ESCRA_HOOKS")
	}
	t.Logf("escra.ko for %s: %d bytes; dkms status: %s", kver, len(b), strings.TrimSpace(status))
}
