package scripts_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestKernelDebHostConfig runs the configuration step of `make kernel-deb
// KERNEL_DEB_CONFIG=host` (scripts/kernel-deb.sh --config) for 6.1 and 6.12
// and checks the .config a host build would use: Debian's own
// configuration, changed only by patches/escra-host.config (and what the
// toolchain reports about itself), with every Escra option in and the
// signing settings of Debian's build machines gone. The build itself takes
// hours on 2 cores and is not run here. About 45 s per version (unpacking
// the source), in a private cache so the step always runs.
func TestKernelDebHostConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("unpacks two kernel trees")
	}
	frag := readConfig(t, "../patches/escra-host.config")
	if frag["CONFIG_ESCRA_HOOKS"] != "y" {
		t.Fatalf("patches/escra-host.config does not ask for CONFIG_ESCRA_HOOKS=y")
	}
	for _, v := range []string{"6.1", "6.12"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat("/usr/src/linux-source-" + v + ".tar.xz"); err != nil {
				t.Skipf("linux-source-%s is not installed (make setup)", v)
			}
			// Debian's headers, unpacked in the project's cache by set-up
			// (never installed: the 6.12 ones pull a kernel image).
			hdr := exec.Command("./kernel-headers.sh", "--cached")
			hdr.Env = append(os.Environ(), "ESCRA_KERNEL_VERSION="+v)
			tree, err := hdr.Output()
			if err != nil {
				t.Skipf("no Debian %s headers in the cache (make setup)", v)
			}
			basePath := filepath.Join(strings.TrimSpace(string(tree)), ".config")
			base := readConfig(t, basePath)

			cmd := exec.Command("./kernel-deb.sh", "--config")
			cmd.Env = append(os.Environ(), "KERNEL_DEB_CONFIG=host", "ESCRA_KERNEL_VERSION="+v,
				"ESCRA_KERNEL_DEB_CACHE="+t.TempDir(), "KERNEL_DEB_BASE=", "KERNEL_DEB_LSMOD=", "KERNEL_DEB_BTF=")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("kernel-deb.sh --config: %v\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			path := lines[len(lines)-1]
			cfg := readConfig(t, path)

			// Every line of the fragment, as written.
			for k, want := range frag {
				if got := cfg[k]; got != want {
					t.Errorf("%s=%s, escra-host.config asks for %s", k, got, want)
				}
			}
			// Otherwise Debian's configuration: a host kernel, not ours.
			toolchain := regexp.MustCompile(`^CONFIG_(\w+_VERSION(_TEXT)?|(CC|AS|LD|TOOLCHAIN|RUSTC|PAHOLE)_(HAS|IS|CAN|SUPPORTS)_\w+|GCC_ASM_\w+|CC_NO_\w+)$`)
			var changed []string
			for k := range union(base, cfg) {
				b, c := orN(base, k), orN(cfg, k)
				if _, ours := frag[k]; ours || toolchain.MatchString(k) || b == c {
					continue
				}
				changed = append(changed, k+": "+b+" -> "+c)
			}
			sort.Strings(changed)
			if len(changed) > 0 {
				t.Errorf("%d options differ from Debian's %s beyond escra-host.config:\n%s", len(changed), basePath, strings.Join(changed, "\n"))
			}
			// What makes it boot a real host: storage, file systems, network,
			// firmware, an initramfs.
			for _, k := range []string{"CONFIG_BLK_DEV_NVME", "CONFIG_SATA_AHCI", "CONFIG_EXT4_FS", "CONFIG_E1000E",
				"CONFIG_VIRTIO_NET", "CONFIG_EFI", "CONFIG_BLK_DEV_INITRD", "CONFIG_DM_CRYPT"} {
				if cfg[k] != "y" && cfg[k] != "m" {
					t.Errorf("%s=%q: not a configuration for real hardware", k, cfg[k])
				}
			}
			// An unsigned local build: no certificate or key of Debian's
			// build machines, signing with the kernel's own throwaway key.
			for k, val := range cfg {
				if strings.Contains(val, "debian/certs") || strings.Contains(val, "output/") {
					t.Errorf("%s=%s names a file of Debian's build machines", k, val)
				}
			}
			if cfg["CONFIG_SYSTEM_TRUSTED_KEYS"] != `""` || cfg["CONFIG_MODULE_SIG_KEY"] != `"certs/signing_key.pem"` {
				t.Errorf("SYSTEM_TRUSTED_KEYS=%s MODULE_SIG_KEY=%s", cfg["CONFIG_SYSTEM_TRUSTED_KEYS"], cfg["CONFIG_MODULE_SIG_KEY"])
			}
			if r := cfg["CONFIG_SYSTEM_REVOCATION_KEYS"]; r != "" && r != `""` {
				t.Errorf("CONFIG_SYSTEM_REVOCATION_KEYS=%s", r)
			}
			if cfg["CONFIG_MODULE_SIG_FORCE"] == "y" {
				t.Errorf("CONFIG_MODULE_SIG_FORCE=y: escra.ko from DKMS is unsigned and would not load")
			}
			// Debian's BTF stays; building it needs pahole.
			if cfg["CONFIG_DEBUG_INFO_BTF"] == "y" {
				if _, err := exec.LookPath("pahole"); err != nil {
					t.Errorf("CONFIG_DEBUG_INFO_BTF=y but no pahole (dwarves) to build it")
				}
			}
			n := 0
			for _, val := range cfg {
				if val == "y" || val == "m" {
					n++
				}
			}
			t.Logf("%s over %s: %d options on; changed by escra-host.config: %d lines", path, basePath, n, len(frag))
		})
	}
}

// readConfig parses a kernel .config or fragment: CONFIG_X=v, and
// "# CONFIG_X is not set" as "n".
func readConfig(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	notSet := regexp.MustCompile(`^# (CONFIG_\w+) is not set$`)
	m := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "CONFIG_") {
			m[k] = v
		} else if g := notSet.FindStringSubmatch(line); g != nil {
			m[g[1]] = "n"
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// orN: an option a .config does not list is off.
func orN(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return "n"
}

func union(a, b map[string]string) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}
