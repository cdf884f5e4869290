package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBadFlagsOneLineExit2(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"--kappa", "3"}, {"--window", "0"}, {"--period", "5s"},
		{"--safe-margin", "lots"}, {"--log-level", "loud"}, {"--apps", "/nonexistent"}, {"extra"},
		{"--host-apps", "/nonexistent"}, {"--max-containers-per-host", "-1"}, {"--host-max-share", "0"}, {"--host-max-share", "1.5"}, {"--session-msg-burst", "0"}, {"--max-sessions", "-1"},
		{"--insecure", "--store", "etcd://nohost"}, {"--insecure", "--store", "etcd://127.0.0.1:1", "--leader-ttl", "500ms"},
		{"--insecure", "--store", "zookeeper://x:1"}} {
		var e bytes.Buffer
		if rc := run(args, &e); rc != 2 || strings.Count(e.String(), "\n") != 1 {
			t.Errorf("%v: rc %d, stderr %q", args, rc, e.String())
		}
	}
	// etcd without its TLS and RBAC: one line naming the flags.
	var e bytes.Buffer
	if rc := run([]string{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379"}, &e); rc != 2 ||
		!strings.Contains(e.String(), "--etcd-cacert, --etcd-cert and --etcd-key") || !strings.Contains(e.String(), "--insecure-store") {
		t.Errorf("plain etcd:// without --insecure-store: rc %d, %q", rc, e.String())
	}
	e.Reset()
	if rc := run([]string{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379", "--insecure-store"}, &e); rc != 0 {
		t.Errorf("etcd:// with --insecure-store: rc %d, %q", rc, e.String())
	}
}

func TestLoadHostApps(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("h1: [web, db]\nh2: []\n"), 0o600)
	m, err := loadHostApps(good)
	if err != nil || len(m["h1"]) != 2 || m["h2"] == nil && len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"- web\n", "h1: [\"no space\"]\n", "h1: web\n"} {
		p := filepath.Join(dir, "bad.yaml")
		os.WriteFile(p, []byte(bad), 0o600)
		if _, err := loadHostApps(p); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseApps(t *testing.T) {
	apps, err := parseApps("f", []byte("- {name: web, cpu: 1500m, memory: 2GiB, sigma: 0.1}\n- name: db\n  cpu: \"2\"\n  memory: 512MiB\n"))
	if err != nil || len(apps) != 2 || apps[0].CPUCores != 1.5 || apps[0].MemoryBytes != 2<<30 || apps[1].MemoryBytes != 512<<20 {
		t.Fatalf("%+v %v", apps, err)
	}
	for _, bad := range []string{"- {name: x, cpu: -1, memory: 1GiB}", "- {name: x, cpu: 1, memory: 1GiB, what: 1}", "{a: b}", "- {name: 'bad name', cpu: 1, memory: 1GiB}"} {
		if _, err := parseApps("f", []byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	p := filepath.Join(t.TempDir(), "apps.yaml")
	os.WriteFile(p, []byte("- {name: web, cpu: 1, memory: 1GiB}\n"), 0o644)
	if apps, err := loadApps(p); err != nil || len(apps) != 1 {
		t.Fatalf("load: %v", err)
	}
}

func FuzzParseApps(f *testing.F) {
	f.Add([]byte("- {name: web, cpu: 1500m, memory: 2GiB, sigma: 0.1}\n"))
	f.Add([]byte("- name: db\n  cpu: \"2\"\n  memory: 512MiB\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		apps, err := parseApps("f", data)
		if err != nil {
			return
		}
		for _, a := range apps {
			if a.Validate() != nil {
				t.Fatalf("invalid app accepted: %+v", a)
			}
		}
	})
}

var sigterm = syscall.SIGTERM

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The --apps file is the spec format (docs/spec.md): several apps as YAML
// documents, with or without containers; the spec is kept to be shown.
func TestParseAppsSpecFormat(t *testing.T) {
	apps, err := parseApps("apps.yaml", []byte("name: web\ncpu: 1500m\nmemory: 2GiB\nsigma: 0.1\n---\nname: db\ncpu: 2\nmemory: 512MiB\nallocator: {policy: escra, kappa: 0.5}\ncontainers: [{name: x, image: y}]\n"))
	if err != nil || len(apps) != 2 || apps[0].CPUCores != 1.5 || apps[0].Params != nil || apps[1].Params == nil || apps[1].Params.Kappa != 0.5 {
		t.Fatalf("%+v %v", apps, err)
	}
	if apps[0].Spec == nil || apps[0].Spec.Memory != "2GiB" || len(apps[1].Spec.Containers) != 1 {
		t.Fatalf("specs not kept: %+v %+v", apps[0].Spec, apps[1].Spec)
	}
	// Every problem is reported, with its line.
	_, err = parseApps("apps.yaml", []byte("name: Web\ncpu: 1\nmemory: 1GiB\n---\nname: db\ncpu: 1\nmemory: 1GiB\ncolour: red\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 1 || !strings.Contains(err.Error(), "apps.yaml:1: name") || !strings.Contains(err.Error(), "apps.yaml:8: colour") {
		t.Fatalf("want both problems: %v", err)
	}
}

// --check-config passes a good configuration without opening the store
// (a running controller holds its lock) and fails a bad one with one line.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	var e bytes.Buffer
	if rc := run([]string{"--check-config", "--insecure", "--state-dir", dir}, &e); rc != 0 {
		t.Fatalf("good config: rc %d, %q", rc, e.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "controller.db")); err == nil {
		t.Error("--check-config created the store")
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, args := range [][]string{
		{"--check-config", "--insecure", "--state-dir", file},
		{"--check-config", "--insecure", "--state-dir", dir, "--listen", "nope"},
		{"--check-config", "--insecure", "--state-dir", dir, "--admin-listen", "127.0.0.1:http-nope"},
		{"--check-config", "--state-dir", dir, "--tls-ca", filepath.Join(dir, "none.pem")},
		{"--check-config", "--insecure", "--state-dir", dir, "--store", "etcd://nohost"},
		{"--check-config", "--insecure", "--state-dir", dir, "--etcd-cacert", file},
		{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379", "--etcd-cacert", filepath.Join(dir, "none.pem")},
		{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379", "--etcd-cacert", file},
		{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379", "--etcd-cert", file},
		{"--check-config", "--insecure", "--store", "etcd://127.0.0.1:2379"},
		{"--check-config", "--insecure", "--state-dir", dir, "--insecure-store"},
	} {
		e.Reset()
		if rc := run(args, &e); rc != 2 || strings.Count(e.String(), "\n") != 1 {
			t.Errorf("%v: rc %d, stderr %q", args, rc, e.String())
		}
	}
}

// An --apps entry can carry the pema policy's SLO; pema without one is refused.
func TestParseAppsSLO(t *testing.T) {
	apps, err := parseApps("f", []byte("- name: shop\n  cpu: 1\n  memory: 1GiB\n  policy: pema\n  slo: {p95: 50ms, listen: '127.0.0.1:0', upstream: '127.0.0.1:9000'}\n"))
	if err != nil || len(apps) != 1 || apps[0].SLO == nil || apps[0].SLO.P95 != 50*time.Millisecond {
		t.Fatalf("%+v %v", apps, err)
	}
	if _, err := parseApps("f", []byte("- {name: shop, cpu: 1, memory: 1GiB, policy: pema}\n")); err == nil {
		t.Fatal("pema without an slo accepted")
	}
}
