package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/internal/simdaemon"
)

func TestMain(m *testing.M) {
	// No test reads the config file of whoever runs them.
	dir, err := os.MkdirTemp("", "escractl-test")
	if err == nil {
		os.Setenv("ESCRACONFIG", filepath.Join(dir, "none.yaml"))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Contexts name controllers; the current one is used when no flag or
// variable says otherwise, and flags win.
func TestConfigContexts(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "sub", "config.yaml")
	t.Setenv("ESCRACONFIG", cfgPath)
	t.Setenv("ESCRA_CONTROLLER", "")
	f, srv := newFake(t)
	sample(f)
	if r := runCLI(t, "config", "set-context", "lab", "--controller", srv.URL, "--certs", "/nonexistent"); r.code != 0 || !strings.Contains(r.stdout, `context "lab" created`) {
		t.Fatalf("set-context: %+v", r)
	}
	if r := runCLI(t, "config", "set-context", "dead", "--controller", deadURL(t)); r.code != 0 {
		t.Fatalf("set-context dead: %+v", r)
	}
	if r := runCLI(t, "config", "use-context", "lab"); r.code != 0 || r.stdout != "switched to context \"lab\"\n" {
		t.Fatalf("use-context: %+v", r)
	}
	r := runCLI(t, "config", "get-contexts")
	if r.code != 0 || !strings.Contains(r.stdout, "*        lab") || !strings.Contains(r.stdout, srv.URL) || !strings.Contains(r.stdout, "dead") {
		t.Fatalf("get-contexts:\n%s", r.stdout)
	}
	if r := runCLI(t, "config", "current-context"); r.stdout != "lab\n" {
		t.Fatalf("current-context: %+v", r)
	}
	// The current context's controller answers.
	if r := runCLI(t, "get", "apps", "-o", "name"); r.code != 0 || r.stdout != "app/other\napp/shop\n" {
		t.Fatalf("get through the current context: %+v", r)
	}
	// --context picks another; --controller overrides both.
	if r := runCLI(t, "--context", "dead", "get", "apps"); r.code != 1 || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("--context dead: %+v", r)
	}
	if r := runCLI(t, "--context", "dead", "--controller", srv.URL, "get", "apps", "-o", "name"); r.code != 0 {
		t.Fatalf("--controller over the context: %+v", r)
	}
	t.Setenv("ESCRA_CONTROLLER", deadURL(t))
	if r := runCLI(t, "get", "apps"); r.code != 1 || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("$ESCRA_CONTROLLER over the context: %+v", r)
	}
	t.Setenv("ESCRA_CONTROLLER", "")
	// Bad input: one line, non-zero.
	if r := runCLI(t, "--context", "nope", "get", "apps"); r.code != 2 || !strings.Contains(r.stderr, `--context "nope": no such context`) {
		t.Errorf("unknown --context: %+v", r)
	}
	if r := runCLI(t, "config", "use-context", "nope"); r.code != 1 || !strings.Contains(r.stderr, `no context "nope"`) {
		t.Errorf("use-context of an unknown one: %+v", r)
	}
	if r := runCLI(t, "config", "set-context", "x", "--controller", "ctl:7472"); r.code != 2 {
		t.Errorf("set-context without a scheme: %+v", r)
	}
	if r := runCLI(t, "config", "frob"); r.code != 2 || !strings.Contains(r.stderr, `unknown subcommand "frob"`) {
		t.Errorf("config frob: %+v", r)
	}
	if r := runCLI(t, "config", "delete-context", "dead"); r.code != 0 || strings.Contains(runCLI(t, "config", "get-contexts").stdout, "dead") {
		t.Errorf("delete-context: %+v", r)
	}
	if err := os.WriteFile(cfgPath, []byte("current-context: lab\ncontextz: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "get", "apps"); r.code != 1 || !strings.Contains(r.stderr, "config "+cfgPath) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("a broken config file: %+v", r)
	}
}

// diff exits 0 when the same, 1 when different, 2 on an error, so a
// script can tell a failure from a difference.
func TestDiffExitCodes(t *testing.T) {
	_, url := startController(t)
	spec := writeSpec(t, "name: d1\ncpu: 1\nmemory: 64MiB\n")
	// Differences are no failure: nothing on stderr (runIn does not ask for a line).
	if r := runIn(t, "", "--controller", url, "diff", "-f", spec); r.code != 1 || !strings.Contains(r.stdout, "+++") || r.stderr != "" {
		t.Fatalf("diff of a new app: %+v", r)
	}
	if r := runCLI(t, "--controller", url, "apply", "-f", spec); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI(t, "--controller", url, "diff", "-f", spec); r.code != 0 || r.stdout != "" {
		t.Fatalf("diff of the applied spec: %+v", r)
	}
	if r := runCLI(t, "--controller", deadURL(t), "diff", "-f", spec); r.code != 2 || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("diff with the controller down: %+v", r)
	}
	bad := writeSpec(t, "name: d1\ncpu: -1\nmemory: 64MiB\n")
	if r := runCLI(t, "--controller", url, "diff", "-f", bad); r.code != 2 || !strings.Contains(r.stderr, "cpu") {
		t.Errorf("diff of a bad spec: %+v", r)
	}
	if r := runCLI(t, "--controller", url, "diff", "-f", filepath.Join(t.TempDir(), "missing.yaml")); r.code != 2 {
		t.Errorf("diff of a missing file: %+v", r)
	}
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// -f DIR reads the directory's specs, -R its subdirectories too; labels
// select apps and their containers for get and delete.
func TestDirectoriesAndSelectors(t *testing.T) {
	s, url := startController(t)
	ctl := []string{"--controller", url}
	dir := writeTree(t, map[string]string{
		"web.yaml":          "name: web\ncpu: 1\nmemory: 64MiB\nlabels: {team: shop, tier: front}\n",
		"README.md":         "not a spec\n",
		"db/db.yml":         "name: db\ncpu: 1\nmemory: 64MiB\nlabels: {team: shop, tier: data}\n",
		"other/batch.json":  `{"name": "batch", "cpu": 2, "memory": "128MiB", "labels": {"team": "science"}}`,
		"other/deep/x.yaml": "name: deep\ncpu: 1\nmemory: 64MiB\n",
	})
	if r := runCLI(t, append(ctl, "apply", "-f", dir)...); r.code != 0 || strings.Count(r.stdout, "set on the controller") != 1 {
		t.Fatalf("apply -f DIR: %+v", r)
	}
	if findApp(s, "db") != nil {
		t.Fatal("apply -f DIR without -R read a subdirectory")
	}
	if r := runCLI(t, append(ctl, "apply", "-f", dir, "-R")...); r.code != 0 || strings.Count(r.stdout, "set on the controller") != 3 {
		t.Fatalf("apply -f DIR -R: %+v", r)
	}
	for _, n := range []string{"web", "db", "batch", "deep"} {
		if findApp(s, n) == nil {
			t.Errorf("app %s not applied by -R", n)
		}
	}
	if r := runCLI(t, append(ctl, "diff", "-R", "-f", dir)...); r.code != 0 {
		t.Errorf("diff -R of what was applied: %+v", r)
	}
	if r := runCLI(t, append(ctl, "apply", "-f", t.TempDir())...); r.code != 1 || !strings.Contains(r.stderr, "no .yaml, .yml or .json files") {
		t.Errorf("apply -f of an empty directory: %+v", r)
	}

	get := func(args ...string) string {
		t.Helper()
		r := runCLI(t, append(ctl, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
		return r.stdout
	}
	for sel, want := range map[string]string{
		"team=shop":            "app/db\napp/web\n",
		"team==shop,tier=data": "app/db\n",
		"team,tier!=front":     "app/batch\napp/db\n",
		"!team":                "app/deep\n",
		"escra.app=batch":      "app/batch\n",
		"team=nobody":          "",
	} {
		if got := get("get", "apps", "-l", sel, "-o", "name"); got != want {
			t.Errorf("get apps -l %s: %q, want %q", sel, got, want)
		}
	}
	if got := get("get", "apps", "-l", "team=shop", "-o", "yaml"); !strings.Contains(got, "labels:\n    team: shop\n    tier: data\n") {
		t.Errorf("get -o yaml shows no labels:\n%s", got)
	}
	// Containers are selected by their app's labels.
	d, err := simdaemon.Dial(s.TCPAddr(), "h1", 2, 4<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Register(1, "web", 50000, 32<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.Register(2, "batch", 50000, 32<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "two members", func() bool { return len(s.Snapshot().Containers) == 2 })
	var cs []adminclient.Container
	if err := json.Unmarshal([]byte(get("get", "containers", "-l", "team=shop", "-o", "json")), &cs); err != nil || len(cs) != 1 || cs[0].App != "web" {
		t.Errorf("get containers -l team=shop: %+v %v", cs, err)
	}
	// Bad selectors and kinds: one line, exit 2.
	for _, args := range [][]string{{"get", "apps", "-l", "team=a b"}, {"get", "apps", "-l", "a,,b"}, {"get", "hosts", "-l", "a=b"}, {"delete", "web", "-l", "a=b"}} {
		if r := runCLI(t, append(ctl, args...)...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: %+v", args, r)
		}
	}
	// delete -l: dry runs delete nothing, then the matching apps go.
	if r := runCLI(t, append(ctl, "delete", "-l", "team=shop", "--dry-run")...); r.code != 0 || r.stdout != "app db deleted (dry run)\napp web deleted (dry run)\n" {
		t.Errorf("delete -l --dry-run: %+v", r)
	}
	if r := runCLI(t, append(ctl, "delete", "-l", "team=shop", "--dry-run=server")...); r.code != 0 ||
		r.stdout != "app db deleted, 0 containers removed (server dry run)\napp web deleted, 1 containers removed (server dry run)\n" {
		t.Errorf("delete -l --dry-run=server: %+v", r)
	}
	if findApp(s, "web") == nil || findApp(s, "db") == nil {
		t.Fatal("a dry run deleted an app")
	}
	// A real delete removes containers through their daemon, which the
	// simulated one does not do: it goes first.
	d.Close()
	waitUntil(t, 5*time.Second, "no members", func() bool { return len(s.Snapshot().Containers) == 0 })
	if r := runCLI(t, append(ctl, "delete", "-l", "team=shop")...); r.code != 0 || r.stdout != "app db deleted\napp web deleted\n" {
		t.Errorf("delete -l: %+v", r)
	}
	if findApp(s, "web") != nil || findApp(s, "db") != nil || findApp(s, "batch") == nil {
		t.Error("delete -l removed the wrong apps")
	}
	if r := runCLI(t, append(ctl, "delete", "-l", "team=shop")...); r.code != 0 || !strings.Contains(r.stdout, "no apps match") {
		t.Errorf("delete -l matching nothing: %+v", r)
	}
}

// --dry-run=server has the controller check what the client cannot (a
// policy change on an app with members) and stores nothing.
func TestServerDryRun(t *testing.T) {
	s, url := startController(t)
	ctl := []string{"--controller", url}
	spec := writeSpec(t, "name: dr\ncpu: 1\nmemory: 64MiB\n")
	if r := runCLI(t, append(ctl, "apply", "-f", spec, "--dry-run=server")...); r.code != 0 || !strings.HasPrefix(r.stdout, "app dr created (server dry run)\n") ||
		!strings.HasSuffix(r.stdout, "  controller accepts: 1.00 cores, 64MiB, policy escra, mode enforce\n") {
		t.Fatalf("apply --dry-run=server: %+v", r)
	}
	if findApp(s, "dr") != nil {
		t.Fatal("a server dry run stored the app")
	}
	if r := runCLI(t, append(ctl, "apply", "-f", spec)...); r.code != 0 {
		t.Fatal(r)
	}
	d, err := simdaemon.Dial(s.TCPAddr(), "h1", 2, 4<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Register(1, "dr", 50000, 32<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "a member", func() bool { return findApp(s, "dr").Members == 1 })
	changed := writeSpec(t, "name: dr\ncpu: 1\nmemory: 64MiB\nallocator: {policy: escra, kappa: 0.5}\n")
	if r := runCLI(t, append(ctl, "apply", "-f", changed, "--dry-run")...); r.code != 0 {
		t.Errorf("client dry run: %+v", r)
	}
	if r := runCLI(t, append(ctl, "apply", "-f", changed, "--dry-run=server")...); r.code != 1 || !strings.Contains(r.stderr, "only while it has no members") {
		t.Errorf("server dry run of a refused change: %+v", r)
	}
	if findApp(s, "dr").Params.Kappa == 0.5 {
		t.Error("the server dry run applied κ")
	}
	if r := runCLI(t, append(ctl, "apply", "-f", spec, "--dry-run=maybe")...); r.code != 2 || !strings.Contains(r.stderr, "want client or server") {
		t.Errorf("--dry-run=maybe: %+v", r)
	}
	if r := runCLI(t, append(ctl, "delete", "nope", "--dry-run=server")...); r.code != 1 || r.stderr != "escractl: unknown app \"nope\"\n" {
		t.Errorf("server dry-run delete of an unknown app: %+v", r)
	}
}

// get -w prints once, again only when the answer changes, and ends
// cleanly with the context (Ctrl-C).
func TestGetWatch(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lockedWriter{}
	done := make(chan int)
	go func() {
		done <- run(&env{ctx: ctx, stdout: out, stderr: out}, []string{"--controller", srv.URL, "get", "apps", "-o", "name", "-w", "--watch-interval", "100ms"})
	}()
	waitUntil(t, 5*time.Second, "the first print", func() bool { return out.String() != "" })
	time.Sleep(350 * time.Millisecond) // several polls, nothing changed
	if got := out.String(); got != "app/other\napp/shop\n" {
		t.Fatalf("unchanged apps printed again: %q", got)
	}
	f.mu.Lock()
	f.apps["zed"] = adminclient.AppBudget{Name: "zed", CPUCores: 1, MemoryBytes: 64 << 20}
	f.mu.Unlock()
	waitUntil(t, 5*time.Second, "the second print", func() bool { return strings.Count(out.String(), "app/shop") == 2 })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("get -w ended with %d: %s", code, out.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("get -w did not end with its context")
	}
	if got := out.String(); got != "app/other\napp/shop\napp/other\napp/shop\napp/zed\n" {
		t.Errorf("get -w printed %q", got)
	}
	if r := runCLI(t, "--controller", srv.URL, "get", "functions", "-w"); r.code != 2 {
		t.Errorf("get functions -w: %+v", r)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// top and describe speak JSON for scripts.
func TestTopAndDescribeJSON(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	r := runCLI(t, "--controller", srv.URL, "top", "--once", "-o", "json")
	var fr topFrame
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &fr) != nil || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("top -o json: %+v", r)
	}
	if len(fr.Containers) != len(f.containers) || len(fr.Apps) != 2 || fr.Containers[0].ThrottledPerSec != nil {
		t.Fatalf("top -o json frame: %+v", fr)
	}
	c0 := f.containers[0]
	for _, got := range fr.Containers {
		if got.ContainerID == c0.ContainerID && (got.CPULimitCores != c0.CPULimitCores() || got.MemoryLimitBytes != c0.MemoryLimitBytes ||
			got.MemorySlackBytes != c0.MemoryLimitBytes-c0.MemoryUsageBytes) {
			t.Errorf("container %+v, from %+v", got, c0)
		}
	}
	if r := runCLI(t, "--controller", srv.URL, "top", "--once", "-o", "yaml"); r.code != 2 {
		t.Errorf("top -o yaml: %+v", r)
	}
	r = runCLI(t, "--controller", srv.URL, "describe", "shop", "-o", "json")
	var d struct {
		App struct {
			Name   string `json:"name"`
			Status struct {
				Members int `json:"members"`
			} `json:"status"`
		} `json:"app"`
		Containers []adminclient.Container `json:"containers"`
		Events     []adminclient.Event     `json:"events"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil {
		t.Fatalf("describe -o json: %+v", r)
	}
	if d.App.Name != "shop" || d.App.Status.Members != len(d.Containers) || len(d.Containers) == 0 || len(d.Events) != 1 || d.Events[0].Kind != "oom-verdict" {
		t.Errorf("describe -o json: %+v", d)
	}
	if r := runCLI(t, "--controller", srv.URL, "describe", "shop", "-o", "wide"); r.code != 2 {
		t.Errorf("describe -o wide: %+v", r)
	}
}
