package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad --restore-after, --controller, --cfs-burst, --controller-dead-after and --procs values end in one clear error
// before anything starts.
func TestBadFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--restore-after", "-1s"}, "--restore-after"},
		{[]string{"--restore-after", "soon"}, "restore-after"},
		{[]string{"--controller", "127.0.0.1:7470,nohost"}, `--controller "nohost"`},
		{[]string{"--cfs-burst", "1.5"}, "--cfs-burst"},
		{[]string{"--controller-dead-after", "-1s"}, "--controller-dead-after"},
		{[]string{"--cfs-burst", "NaN"}, "--cfs-burst"},
		{[]string{"--procs", "-1"}, "--procs"},
	} {
		err := run(c.args, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line naming %s", c.args, err, c.want)
		}
	}
}

// --check-config accepts the shipped config in plain mode without taking
// the engine lock, and refuses each kind of mistake in one line.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	lockDir := filepath.Join(dir, "locks")
	base := []string{"--check-config", "--lock-dir", lockDir, "--host-id", "h1"}
	if err := run(append(base, "--config", "../../../packaging/etc/escrad.yaml", "--insecure"), false); err != nil {
		t.Fatalf("shipped config refused: %v", err)
	}
	if _, err := os.Stat(lockDir); err == nil {
		t.Error("--check-config took the engine lock")
	}
	write := func(body string) string {
		f := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct{ body, want string }{
		{"insecure: true\nbogus: 1\n", "field bogus not found"},
		{"insecure: true\nbackend: nope\n", `unknown backend "nope"`},
		{"insecure: true\nmetrics_listen: nohost\n", "--metrics-listen"},
		{"insecure: true\nperiod: 20s\n", "--period"},
		{"insecure: true\napps: [\"Bad App\"]\n", "apps"},
		{"tls_ca: " + filepath.Join(dir, "none.pem") + "\n", "TLS"},
	} {
		err := run(append(base, "--config", write(c.body)), false)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line naming %s", c.body, err, c.want)
		}
	}
}

// On the kernel backend a verdict deadline longer than escra.ko's own
// (less the reply margin) is refused in one line before anything starts.
func TestOOMDeadlineMismatchRefused(t *testing.T) {
	param := filepath.Join(t.TempDir(), "oom_timeout_ms")
	if err := os.WriteFile(param, []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"--backend", "kernel", "--oom-deadline", "200ms", "--oom-timeout-param", param}, false)
	if err == nil || !strings.Contains(err.Error(), "--oom-deadline 200ms") || !strings.Contains(err.Error(), "oom_timeout_ms 100") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("%v, want one line naming both deadlines", err)
	}
}

// The packaged config starts on the kernel backend at escra.ko's default
// oom_timeout_ms: its deadline is fitted to the module's, not refused.
func TestShippedConfigFitsTheModuleDeadline(t *testing.T) {
	param := filepath.Join(t.TempDir(), "oom_timeout_ms")
	if err := os.WriteFile(param, []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"--config", "../../../packaging/etc/escrad.yaml", "--backend", "kernel", "--oom-timeout-param", param,
		"--oom-state", filepath.Join(t.TempDir(), "oom-armed")}, false)
	if err != nil && strings.Contains(err.Error(), "oom_timeout_ms") {
		t.Fatalf("the shipped escrad.yaml is refused on the kernel backend: %v", err)
	}
}
