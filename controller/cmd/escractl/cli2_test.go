package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/internal/simdaemon"
	"github.com/escra-dev/escra/internal/version"
)

// startController runs the real controller's admin API on loopback.
func startController(t *testing.T) (*server.Server, string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); s.Close() })
	return s, "http://" + s.AdminAddr()
}

func runIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{ctx: context.Background(), stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}
	code := run(e, args)
	return result{code, out.String(), errb.String()}
}

// escractl CMD --help shows that command's flags and an example.
func TestCommandHelp(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"apply":    {"--filename", "--dry-run", "--budget-only"},
		"get":      {"--output", "--no-headers", "--format"},
		"events":   {"--since", "--follow"},
		"delete":   {"--filename", "--dry-run"},
		"diff":     {"--filename"},
		"top":      {"--once", "--interval"},
		"describe": {"--events-since"},
		"version":  {"--client"},
		"certs":    {"--hosts", "--days"},
	} {
		r := runCLI(t, cmd, "--help")
		if r.code != 0 {
			t.Fatalf("%s --help: %+v", cmd, r)
		}
		if !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "escractl "+cmd) {
			t.Errorf("%s --help has no example:\n%s", cmd, r.stdout)
		}
		for _, f := range append(flags, "--controller") {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("%s --help lacks %s:\n%s", cmd, f, r.stdout)
			}
		}
	}
	// The global usage is not what a command's help prints.
	if r := runCLI(t, "apply", "--help"); strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("apply --help prints the global usage")
	}
}

func TestCompletion(t *testing.T) {
	for sh, want := range map[string]string{"bash": "complete -o default", "zsh": "#compdef escractl", "fish": "complete -c escractl"} {
		r := runCLI(t, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: exit %d, lacks %q", sh, r.code, want)
		}
	}
}

func TestVersionShowsController(t *testing.T) {
	_, url := startController(t)
	r := runCLI(t, "--controller", url, "version")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || lines[0] != "escractl "+version.Version || !strings.HasPrefix(lines[1], "controller "+version.Version+" (go") {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "--controller", deadURL(t), "version", "--client"); r.code != 0 || r.stdout != "escractl "+version.Version+"\n" {
		t.Fatalf("--client: %+v", r)
	}
	if r := runCLI(t, "--controller", deadURL(t), "version"); r.code != 1 || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("unreachable controller: %+v", r)
	}
}

// get -o yaml|json prints specs that apply back unchanged; a change shows
// in diff and --dry-run and is taken by apply -f -.
func TestRoundTripAgainstController(t *testing.T) {
	s, url := startController(t)
	ctl := []string{"--controller", url}
	if r := runCLI(t, append(ctl, "apply", "-f", "../../../docs/examples/shop.yaml", "-f", "../../../docs/examples/batch.yaml", "--budget-only")...); r.code != 0 {
		t.Fatalf("apply: %+v", r)
	}
	// A spec without containers is a budget, not an error.
	if r := runIn(t, "name: solo\ncpu: 500m\nmemory: 256MiB\n", append(ctl, "apply", "-f", "-")...); r.code != 0 || !strings.Contains(r.stdout, "budget only") {
		t.Fatalf("budget-only spec from stdin: %+v", r)
	}
	for _, form := range []string{"yaml", "json"} {
		out := runCLI(t, append(ctl, "get", "apps", "-o", form)...)
		if out.code != 0 {
			t.Fatalf("get -o %s: %+v", form, out)
		}
		before := s.Snapshot().Apps
		r := runIn(t, out.stdout, append(ctl, "apply", "-f", "-")...)
		if r.code != 0 || strings.Count(r.stdout, "unchanged") != 3 || strings.Count(r.stdout, "\n") != 3 {
			t.Fatalf("get -o %s | apply -f -: %+v\n%s", form, r, out.stdout)
		}
		after := s.Snapshot().Apps
		for i := range before {
			if before[i].CPUCores != after[i].CPUCores || before[i].Params != after[i].Params || !before[i].Spec.Equal(*after[i].Spec) {
				t.Errorf("%s changed by applying its own listing", before[i].Name)
			}
		}
		if r := runIn(t, out.stdout, append(ctl, "diff", "-f", "-")...); r.code != 0 || r.stdout != "" {
			t.Errorf("diff of the listing: %+v", r)
		}
	}
	one := runCLI(t, append(ctl, "get", "apps", "shop", "-o", "yaml")...)
	if !strings.Contains(one.stdout, "memory: 1.5GiB") || !strings.Contains(one.stdout, "status:") || strings.Contains(one.stdout, "---") {
		t.Fatalf("get apps shop -o yaml:\n%s", one.stdout)
	}
	changed := strings.Replace(one.stdout, "cpu: \"2\"", "cpu: \"3\"", 1)
	if changed == one.stdout {
		t.Fatalf("no cpu line to change in:\n%s", one.stdout)
	}
	if r := runIn(t, changed, append(ctl, "diff", "-f", "-")...); r.code != 1 || !strings.Contains(r.stdout, "-cpu: \"2\"\n+cpu: \"3\"") ||
		!strings.Contains(r.stdout, "# apply would budget 2 cores") {
		t.Errorf("diff: %+v", r)
	}
	if r := runIn(t, changed, append(ctl, "apply", "--dry-run", "-f", "-")...); r.code != 0 || !strings.Contains(r.stdout, "app shop configured (dry run)") {
		t.Errorf("dry run: %+v", r)
	}
	if a := findApp(s, "shop"); a.CPUCores != 2 {
		t.Fatalf("dry run changed the budget to %g", a.CPUCores)
	}
	if r := runIn(t, changed, append(ctl, "apply", "-f", "-")...); r.code != 0 || findApp(s, "shop").CPUCores != 3 {
		t.Fatalf("apply of the change: %+v", r)
	}
	// Other outputs.
	if r := runCLI(t, append(ctl, "get", "apps", "-o", "name")...); r.stdout != "app/batch\napp/shop\napp/solo\n" {
		t.Errorf("-o name: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "--no-headers")...); r.code != 0 || strings.Contains(r.stdout, "APP") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("--no-headers: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "--format", "{{.name}}={{.cpu}}")...); r.stdout != "batch=4\nshop=3\nsolo=0.5\n" {
		t.Errorf("--format: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "-o", "jsonpath={.items[*].name}")...); r.stdout != "batch shop solo\n" {
		t.Errorf("-o jsonpath: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "shop", "-o", `jsonpath={.memory}{"\t"}{.status.members}`)...); r.stdout != "1.5GiB\t0\n" {
		t.Errorf("-o jsonpath of one app: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "get", "apps", "-o", "wide")...); !strings.Contains(r.stdout, "POLICY") {
		t.Errorf("-o wide: %q", r.stdout)
	}
	if r := runCLI(t, append(ctl, "describe", "shop")...); r.code != 0 || !strings.Contains(r.stdout, "Name:        shop") || !strings.Contains(r.stdout, "κ 0.8") {
		t.Errorf("describe: %+v", r)
	}
	// delete -f takes the names from the specs.
	if r := runCLI(t, append(ctl, "delete", "--dry-run", "-f", "../../../docs/examples/batch.yaml")...); r.code != 0 || findApp(s, "batch") == nil {
		t.Errorf("delete --dry-run: %+v", r)
	}
	if r := runCLI(t, append(ctl, "delete", "-f", "../../../docs/examples/batch.yaml")...); r.code != 0 || r.stdout != "app batch deleted\n" || findApp(s, "batch") != nil {
		t.Errorf("delete -f: %+v", r)
	}
}

func findApp(s *server.Server, name string) *server.AppState {
	for _, a := range s.Snapshot().Apps {
		if a.Name == name {
			return &a
		}
	}
	return nil
}

// Every problem of every spec is listed, one a line, and nothing applied.
func TestApplyListsAllProblems(t *testing.T) {
	s, url := startController(t)
	r := runIn(t, "name: Bad_Name\ncpu: 1\nmemory: 1GiB\n---\nname: b\ncpu: lots\nmemory: 1GiB\ncolour: red\n", "--controller", url, "apply", "-f", "-")
	want := []string{"escractl: stdin:1: name: \"Bad_Name\" must be 1-63 lowercase", "escractl: stdin:6: cpu: \"lots\" is not a CPU quantity", "escractl: stdin:8: colour: unknown field"}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != 1 || len(lines) != len(want) {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want prefix %q", i, lines[i], w)
		}
	}
	if len(s.Snapshot().Apps) != 0 {
		t.Errorf("a bad stream applied something")
	}
}

// events --since replays what the controller kept.
func TestEventsSince(t *testing.T) {
	s, url := startController(t)
	ctl := []string{"--controller", url}
	if r := runIn(t, "name: ev\ncpu: 1\nmemory: 256MiB\n", append(ctl, "apply", "-f", "-")...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	// A host (the daemon protocol, simulated) registers a container of
	// ev and one of another app: two joins, with nobody listening.
	d, err := simdaemon.Dial(s.TCPAddr(), "h1", 2, 4<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Register(1, "ev", 50000, 64<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.Register(2, "other", 50000, 64<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(s.Snapshot().Containers) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := runCLI(t, append(ctl, "events", "ev", "--since", "1h", "--follow=false")...)
	if r.code != 0 || !strings.Contains(r.stdout, "join") || strings.Contains(r.stdout, "other") {
		t.Fatalf("events ev --since: %+v", r)
	}
	r = runCLI(t, append(ctl, "events", "--since", "1h", "--follow=false", "-o", "json")...)
	if r.code != 0 || strings.Count(r.stdout, "\"kind\":\"join\"") != 2 || !strings.HasPrefix(r.stdout, "{\"time\"") {
		t.Fatalf("events --since -o json: %+v", r)
	}
	if r := runCLI(t, append(ctl, "events", "--since", "1ns", "--follow=false")...); r.code != 0 || strings.Contains(r.stdout, "join") {
		t.Errorf("events of the last nanosecond: %+v", r)
	}
	if r := runCLI(t, append(ctl, "events", "--since", "yesterday")...); r.code != 2 {
		t.Errorf("bad --since: %+v", r)
	}
}
