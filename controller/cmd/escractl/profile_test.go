package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

func profileSpec(t *testing.T, image, cmd string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app.yaml")
	y := fmt.Sprintf("name: wys-prof\ncpu: 1\nmemory: 256MiB\ncontainers:\n  - name: app\n    image: %s\n    command: [\"/bin/sh\", \"-c\", %q]\n", image, cmd)
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Bad input ends in one line and status 2, before any container starts.
func TestProfileBadInput(t *testing.T) {
	f := profileSpec(t, "wys-none:latest", "true")
	for _, args := range [][]string{
		{"profile"},
		{"profile", "-f", f, "--cpus", fmt.Sprint(hostCPUCount())},
		{"profile", "-f", f, "--score", "fast"},
		{"profile", "-f", f, "--score", "output"},
		{"profile", "-f", f, "--reps", "0"},
		{"profile", "-f", f, "--margin", "1.5"},
	} {
		r := runCLI(t, args...)
		if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.HasPrefix(r.stderr, "escractl: profile") {
			t.Errorf("%v: code %d stderr %q", args, r.code, r.stderr)
		}
	}
}

// On the real engine: a batch app is run under quota and under a cpuset,
// and the verdict names a label. (Which one depends on the app and the
// load on the host; the test asserts the procedure, not the verdict.)
func TestProfileOnTheRealEngine(t *testing.T) {
	if hostCPUCount() < 2 {
		t.Skip("needs 2 CPUs")
	}
	cli := dockertest.Client(t, "")
	img := dockertest.BusyboxImage(t, cli)
	f := profileSpec(t, img, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	rec := t.TempDir()
	r := runCLI(t, "profile", "-f", f, "--reps", "2", "--name-prefix", "h14-wys-prof", "--record", rec)
	if r.code != 0 {
		t.Fatalf("code %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "of 2 evaluations") || !strings.Contains(r.stdout, "escra.cpu=") {
		t.Fatalf("output:\n%s", r.stdout)
	}
	// --record stores the printed verdict where escrad resolves auto.
	ins, err := cli.ImageInspect(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	c, why := wysiwyg.ResolveAuto(rec, ins.ID)
	if want := map[wysiwyg.Class]string{wysiwyg.C1: "escra.cpu=wysiwyg", wysiwyg.C2: "escra.cpu=shared"}[c]; !strings.Contains(r.stdout, want) || strings.Contains(why, "not profiled") {
		t.Fatalf("recorded %v (%s), but the output says:\n%s", c, why, r.stdout)
	}
	// A failing app is an error, not a verdict.
	f = profileSpec(t, img, "exit 3")
	if r := runCLI(t, "profile", "-f", f, "--reps", "1", "--name-prefix", "h14-wys-prof"); r.code != 1 || !strings.Contains(r.stderr, "status 3") {
		t.Fatalf("failing app: code %d stderr %q", r.code, r.stderr)
	}
}
