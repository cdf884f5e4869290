package scripts_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// setupPackages lists what scripts/setup.sh would install for a profile.
func setupPackages(t *testing.T, profile string) []string {
	t.Helper()
	out, err := exec.Command("./setup.sh", "--print-packages", profile).Output()
	if err != nil {
		t.Fatalf("setup.sh --print-packages %s: %v", profile, err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Fatalf("setup.sh --print-packages %s listed nothing", profile)
	}
	return pkgs
}

// kernelImages walks the hard dependencies of pkgs (alternatives included,
// as apt may pick either) and returns every linux-image package reached.
func kernelImages(t *testing.T, pkgs []string) []string {
	t.Helper()
	args := append([]string{"depends", "--recurse", "--no-recommends", "--no-suggests",
		"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}, pkgs...)
	out, err := exec.Command("apt-cache", args...).Output()
	if err != nil {
		t.Fatalf("apt-cache depends: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[len(f)-1]
		if strings.HasPrefix(name, "linux-image-") {
			seen[name] = true
		}
	}
	var imgs []string
	for n := range seen {
		imgs = append(imgs, n)
	}
	sort.Strings(imgs)
	return imgs
}

// Set-up must never change how the host boots: no package it installs, for
// the main job or for the tests, may depend on a kernel image.
func TestSetupPullsNoKernelImage(t *testing.T) {
	if _, err := exec.LookPath("apt-cache"); err != nil {
		t.Skip("no apt-cache: not a Debian host")
	}
	// The walk must see a kernel image where one is: Debian's 6.12 headers
	// package depends on its image (the reason set-up unpacks headers into
	// the cache instead of installing them).
	if imgs := kernelImages(t, []string{"linux-headers-6.12-amd64"}); len(imgs) == 0 {
		t.Fatal("apt-cache sees no kernel image behind linux-headers-6.12-amd64: the package lists are missing (apt-get update) or the walk is broken")
	}
	for _, profile := range []string{"run", "test"} {
		if imgs := kernelImages(t, setupPackages(t, profile)); len(imgs) > 0 {
			t.Errorf("setup.sh %s would pull kernel images %v", profile, imgs)
		}
	}
}

// The main job needs the engine, and clang for the BPF object make build
// compiles into escrad; not the kernel sources, QEMU, etcd or llvm.
func TestSetupRunProfileIsTheEngineOnly(t *testing.T) {
	run := setupPackages(t, "run")
	has := map[string]bool{}
	for _, p := range run {
		has[p] = true
		for _, heavy := range []string{"linux-", "qemu", "etcd", "debootstrap", "llvm"} {
			if strings.HasPrefix(p, heavy) {
				t.Errorf("setup.sh run installs %s, which the main job does not use", p)
			}
		}
	}
	for _, p := range []string{"clang", "libbpf-dev"} {
		if !has[p] {
			t.Errorf("setup.sh run lacks %s: make build (make run) compiles escrad's BPF object with it", p)
		}
	}
	test := map[string]bool{}
	for _, p := range setupPackages(t, "test") {
		test[p] = true
	}
	for _, p := range run {
		if !test[p] {
			t.Errorf("%s is in the run profile but not in the test profile", p)
		}
	}
	if !test["docker.io"] {
		t.Error("the test profile lacks docker.io")
	}
}
