package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/allocator"
)

// fakeController stands in for the controller's admin API so the CLI around
// it can be tested: it keeps app budgets and serves fixed containers.
type fakeController struct {
	mu         sync.Mutex
	apps       map[string]adminclient.AppBudget
	puts       int
	containers []adminclient.Container
}

func newFake(t *testing.T) (*fakeController, *httptest.Server) {
	f := &fakeController{apps: map[string]adminclient.AppBudget{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		var b adminclient.AppBudget
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Name != r.PathValue("name") {
			http.Error(w, `{"error":"bad budget"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.apps[b.Name] = b
		f.puts++
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/apps/{name}/deploy", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Containers []adminclient.DeployContainer `json:"containers"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad deploy"}`, http.StatusBadRequest)
			return
		}
		var out []adminclient.Placed
		for _, c := range req.Containers {
			out = append(out, adminclient.Placed{Name: c.Name, HostID: "h1", ContainerID: "id-" + c.Name})
		}
		json.NewEncoder(w).Encode(map[string]any{"containers": out})
	})
	mux.HandleFunc("DELETE /v1/apps/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.apps[r.PathValue("name")]; !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"error":"no such app"}`)
			return
		}
		delete(f.apps, r.PathValue("name"))
	})
	mux.HandleFunc("GET /v1/apps", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []adminclient.App
		for _, b := range f.apps {
			a := adminclient.App{Name: b.Name, CPUCores: b.CPUCores, MemoryBytes: b.MemoryBytes, Sigma: b.Sigma}
			for _, c := range f.containers {
				if c.App == b.Name {
					a.Members++
					a.CPUAllocatedCores += c.CPULimitCores()
					a.MemoryAllocatedBytes += c.MemoryLimitBytes
				}
			}
			out = append(out, a)
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /v1/containers", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		json.NewEncoder(w).Encode(f.containers) // a bare array: the client takes both forms
	})
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"hosts": []adminclient.Host{
			{HostID: "h1", Peer: "127.0.0.1:40001", Backend: "BACKEND_CGROUPFS", Containers: 2, Cores: 2, MemoryBytes: 24 << 30}}})
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		app := r.URL.Query().Get("app")
		// The controller's form: server-sent events; a bare JSON line works too.
		fmt.Fprintf(w, "event: limits\ndata: {\"time\":\"2026-01-02T03:04:05Z\",\"app\":%q,\"container_id\":\"aaaaaaaaaaaaaaaaaaaa\",\"host\":\"h1\",\"kind\":\"limits\",\"cpu_quota_us\":80000,\"reason\":\"throttled\"}\n\n", app)
		fmt.Fprintf(w, ": ping\n\n{\"app\":%q,\"kind\":\"oom-verdict\",\"container_id\":\"bbbb\",\"memory_limit_bytes\":335544320,\"granted\":true,\"reason\":\"pool\"}\n", app)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	return runCLICtx(t, context.Background(), args...)
}

func runCLICtx(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{ctx: ctx, stdout: &out, stderr: &errb}
	code := run(e, args)
	r := result{code, out.String(), errb.String()}
	if code != 0 {
		// One line per problem, each saying who speaks.
		for _, l := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
			if !strings.HasPrefix(l, "escractl: ") {
				t.Errorf("a failure must print lines starting \"escractl: \", got %q", r.stderr)
			}
		}
		if r.stderr == "" || !strings.HasSuffix(r.stderr, "\n") {
			t.Errorf("a failure must say why on stderr, got %q", r.stderr)
		}
	}
	return r
}

func writeSpec(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApplySendsBudget(t *testing.T) {
	f, srv := newFake(t)
	r := runCLI(t, "--controller", srv.URL, "apply", "-f", "../../../docs/examples/shop.yaml")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, ok := f.apps["shop"]
	if !ok {
		t.Fatalf("controller got no budget for shop")
	}
	want := adminclient.AppBudget{Name: "shop", CPUCores: 2, MemoryBytes: 1536 << 20, Sigma: 0.1,
		Params: &allocator.Params{Kappa: 0.8, Gamma: 0.2, Upsilon: 20, Window: 10,
			Period: 100 * time.Millisecond, CPUFloorUs: 2000, OOMStepBytes: 64 << 20, SafeMarginBytes: 50 << 20,
			Headroom: 0.1, MinStepUs: 100, FairShareOnThrottle: true, ReleasePeriods: 2, LeaseFraction: 0.5, MemCreditFraction: 0.5}, Policy: "escra",
		// The fields the section names; the controller keeps its own for the rest.
		ParamsNamed: []string{"gamma", "kappa", "period", "reclaim_margin", "upsilon", "window"}}
	if b.Params == nil || *b.Params != *want.Params {
		t.Fatalf("params\n got %+v\nwant %+v", b.Params, want.Params)
	}
	if b.Spec == nil || b.Spec.Name != "shop" || len(b.Spec.Containers) != 2 || b.Spec.Containers[0].Replicas != 3 {
		t.Fatalf("the spec did not go along: %+v", b.Spec)
	}
	b.Params, want.Params, b.Spec = nil, nil, nil
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("budget\n got %+v\nwant %+v", b, want)
	}
	if !strings.Contains(r.stdout, "app shop: budget 2 cores, 1.5GiB") {
		t.Fatalf("stdout %q", r.stdout)
	}
}

func TestApplyFlagAfterCommand(t *testing.T) {
	f, srv := newFake(t)
	r := runCLI(t, "apply", "-f", "../../../docs/examples/minimal.yaml", "--controller", srv.URL)
	if r.code != 0 || f.apps["hello"].CPUCores != 1 {
		t.Fatalf("exit %d %s; apps %v", r.code, r.stderr, f.apps)
	}
}

// A bad spec is refused before the controller hears anything.
func TestApplyBadSpecTouchesNothing(t *testing.T) {
	cases := map[string]string{
		"bad yaml":      "name: [\n",
		"unknown field": "name: a\ncpu: 1\nmemory: 1GiB\ncolour: red\ncontainers: [{name: x, image: y}]\n",
		"impossible":    "name: a\ncpu: 1\nmemory: 1GiB\ncontainers:\n- {name: x, image: y, replicas: 3, min_cpu: 500m}\n",
		"replicas":      "name: a\ncpu: 1\nmemory: 1GiB\ncontainers:\n- {name: x, image: y, replicas: 0}\n",
	}
	wants := map[string]string{
		"bad yaml":      "escractl: app.yaml:1: invalid YAML:",
		"unknown field": "escractl: app.yaml:4: colour: unknown field",
		"impossible":    "escractl: app.yaml:2: cpu: the containers' min_cpu × replicas add up to 1.5 cores, above the limit of 1",
		"replicas":      "escractl: app.yaml:5: containers[0].replicas: 0 must be ≥ 1",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			f, srv := newFake(t)
			r := runCLI(t, "--controller", srv.URL, "apply", "-f", writeSpec(t, body))
			if r.code != 1 || !strings.HasPrefix(r.stderr, wants[name]) {
				t.Fatalf("exit %d stderr %q, want prefix %q", r.code, r.stderr, wants[name])
			}
			if f.puts != 0 {
				t.Fatalf("controller was called for an invalid spec")
			}
		})
	}
}

func deadURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestControllerUnreachable(t *testing.T) {
	url := deadURL(t)
	for _, args := range [][]string{
		{"apply", "-f", "../../../docs/examples/minimal.yaml"},
		{"get", "apps"}, {"get", "hosts", "-o", "json"}, {"delete", "x"}, {"top", "--once"}, {"events"},
	} {
		r := runCLI(t, append([]string{"--controller", url}, args...)...)
		want := "escractl: controller at " + url + " unreachable: dial "
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%v: exit %d stderr %q, want prefix %q", args, r.code, r.stderr, want)
		}
	}
}

func TestControllerFromEnv(t *testing.T) {
	_, srv := newFake(t)
	t.Setenv("ESCRA_CONTROLLER", srv.URL)
	if r := runCLI(t, "get", "hosts"); r.code != 0 || !strings.Contains(r.stdout, "h1") {
		t.Fatalf("%+v", r)
	}
}

func TestDelete(t *testing.T) {
	f, srv := newFake(t)
	f.apps["shop"] = adminclient.AppBudget{Name: "shop"}
	if r := runCLI(t, "--controller", srv.URL, "delete", "shop"); r.code != 0 || r.stdout != "app shop deleted\n" {
		t.Fatalf("%+v", r)
	}
	r := runCLI(t, "--controller", srv.URL, "delete", "shop")
	if r.code != 1 || r.stderr != "escractl: unknown app \"shop\"\n" {
		t.Fatalf("%+v", r)
	}
}

func sample(f *fakeController) {
	f.apps["shop"] = adminclient.AppBudget{Name: "shop", CPUCores: 2, MemoryBytes: 1 << 30}
	f.apps["other"] = adminclient.AppBudget{Name: "other", CPUCores: 1, MemoryBytes: 1 << 30}
	f.containers = []adminclient.Container{
		{ContainerID: "aaaaaaaaaaaaaaaaaaaa", Name: "web-1", App: "shop", HostID: "h1", CPUQuotaUs: 80000, CPUPeriodUs: 100000, CPUUsageUs: 50000,
			ThrottledPeriods: 10, MemoryLimitBytes: 300 << 20, MemoryUsageBytes: 200 << 20, OOMGrants: 2},
		{ContainerID: "bbbbbbbbbbbbbbbbbbbb", Name: "web-2", App: "shop", HostID: "h2", CPUQuotaUs: 60000, CPUPeriodUs: 100000, CPUUsageUs: 60000,
			ThrottledPeriods: 0, MemoryLimitBytes: 256 << 20, MemoryUsageBytes: 100 << 20, OOMDenials: 1},
		{ContainerID: "cccccccccccccccccccc", Name: "job-1", App: "other", HostID: "h1", CPUQuotaUs: 100000, CPUPeriodUs: 100000, MemoryLimitBytes: 1 << 20},
	}
}

func TestGet(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	r := runCLI(t, "--controller", srv.URL, "get", "apps")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "APP") || !strings.Contains(r.stdout, "shop") {
		t.Fatalf("get apps:\n%s", r.stdout)
	}
	r = runCLI(t, "--controller", srv.URL, "get", "containers", "shop")
	if r.code != 0 || strings.Contains(r.stdout, "job-1") || !strings.Contains(r.stdout, "web-2") || !strings.Contains(r.stdout, "aaaaaaaaaaaa ") {
		t.Fatalf("get containers shop:\n%s", r.stdout)
	}
	r = runCLI(t, "--controller", srv.URL, "get", "containers", "-o", "json")
	var cs []adminclient.Container
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &cs) != nil || len(cs) != 3 {
		t.Fatalf("get containers -o json: %+v", r)
	}
	r = runCLI(t, "--controller", srv.URL, "get", "apps", "nope")
	if r.code != 1 || r.stderr != "escractl: unknown app \"nope\"\n" {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "--controller", srv.URL, "get", "pods"); r.code != 2 || !strings.Contains(r.stderr, "unknown kind \"pods\"") {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "--controller", srv.URL, "get", "apps", "-o", "xml"); r.code != 2 {
		t.Fatalf("%+v", r)
	}
}

func TestTableFitsTerminal(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	var out, errb bytes.Buffer
	e := &env{ctx: context.Background(), stdout: &out, stderr: &errb, width: 40}
	if code := run(e, []string{"--controller", srv.URL, "top", "--once"}); code != 0 {
		t.Fatal(errb.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if len([]rune(l)) > 40 {
			t.Fatalf("line wider than the terminal: %q", l)
		}
	}
}

func TestTopOnce(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	r := runCLI(t, "--controller", srv.URL, "top", "shop", "--once")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, want := range []string{"CONTAINER", "CPU SLACK", "THR/s", "MEM SLACK", "OOM OK", "web-1", "web-2", "0.30", "100MiB", "156MiB"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("top output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "job-1") {
		t.Errorf("top shop shows another app's container:\n%s", r.stdout)
	}
	// Per-app totals against the global limit: 1.4 of 2 cores allocated.
	if !strings.Contains(r.stdout, "1.40 70%") || !strings.Contains(r.stdout, "556MiB 54%") {
		t.Errorf("app totals missing:\n%s", r.stdout)
	}
	r = runCLI(t, "--controller", srv.URL, "top", "ghost", "--once")
	if r.code != 1 || r.stderr != "escractl: unknown app \"ghost\"\n" {
		t.Fatalf("%+v", r)
	}
}

// Throttled periods per second come from the change between two frames.
func TestTopThrottleRate(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	c, _ := adminclient.New(srv.URL)
	e := &env{ctx: context.Background()}
	st := &topState{last: map[string]uint64{}}
	var first bytes.Buffer
	if err := st.frame(e, c, "shop", &first); err != nil {
		t.Fatal(err)
	}
	st.lastTime = st.lastTime.Add(-2 * time.Second) // pretend two seconds passed
	f.mu.Lock()
	f.containers[0].ThrottledPeriods += 30
	f.mu.Unlock()
	var second bytes.Buffer
	if err := st.frame(e, c, "shop", &second); err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(second.String(), "\n") {
		if strings.HasPrefix(l, "web-1") {
			row = l
		}
	}
	if !strings.Contains(row, " 15.0 ") && !strings.Contains(row, " 14.9 ") {
		t.Fatalf("want about 15 throttled periods/s for web-1, row %q", row)
	}
}

func TestTopLiveStopsOnCancel(t *testing.T) {
	f, srv := newFake(t)
	sample(f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r := runCLICtx(t, ctx, "--controller", srv.URL, "top", "--interval", "100ms")
	if r.code != 0 || strings.Count(r.stdout, "escractl top") < 2 {
		t.Fatalf("want several frames and a clean exit, got %d:\n%s", r.code, r.stdout)
	}
}

func TestEvents(t *testing.T) {
	_, srv := newFake(t)
	r := runCLI(t, "--controller", srv.URL, "events", "shop")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 events, got:\n%s", r.stdout)
	}
	if !strings.Contains(lines[0], "limits") || !strings.Contains(lines[0], "shop/aaaaaaaaaaaa@h1") || !strings.Contains(lines[0], "cpu 80000us/period (throttled)") {
		t.Errorf("line 1: %q", lines[0])
	}
	if !strings.Contains(lines[1], "oom-verdict") || !strings.Contains(lines[1], "mem 320MiB granted (pool)") {
		t.Errorf("line 2: %q", lines[1])
	}
	r = runCLI(t, "--controller", srv.URL, "events", "-o", "json")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `{"time":"2026-01-02T03:04:05Z"`) {
		t.Fatalf("%+v", r)
	}
}

func TestControllerErrorIsOneLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "pool broken\nsecond line\n")
	}))
	defer srv.Close()
	r := runCLI(t, "--controller", srv.URL, "apply", "-f", "../../../docs/examples/minimal.yaml")
	if r.code != 1 || r.stderr != "escractl: apply hello: controller: pool broken\n" {
		t.Fatalf("%+v", r)
	}
	r = runCLI(t, "--controller", srv.URL, "get", "apps")
	if r.code != 1 || r.stderr != "escractl: controller: pool broken\n" {
		t.Fatalf("%+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "escractl: no command given"},
		{[]string{"frob"}, 2, "escractl: unknown command \"frob\""},
		{[]string{"--bogus"}, 2, "escractl: unknown flag: --bogus (see escractl --help)"},
		{[]string{"apply"}, 2, "escractl: apply: give the spec with -f FILE"},
		{[]string{"get", "apps", "--bogus"}, 2, "escractl: get: unknown flag: --bogus (see escractl get --help)"},
		{[]string{"get", "apps", "--format", "{{.name"}, 2, "escractl: get: --format: "},
		{[]string{"top", "a", "b"}, 2, "escractl: top: at most one app name"},
		{[]string{"delete"}, 2, "escractl: delete: give an app name, -f FILE or -l SELECTOR"},
		{[]string{"--controller", "ftp://x", "get", "apps"}, 1, "escractl: bad controller URL \"ftp://x\""},
		{[]string{"apply", "-f", "/nonexistent/app.yaml"}, 1, "escractl: /nonexistent/app.yaml: no such file or directory"},
		{[]string{"certs", "--dir", "/nonexistent-escra", "--hosts", "a/b"}, 1, "escractl: certs: host name \"a/b\""},
		{[]string{"certs", "--days", "0"}, 2, "escractl: certs: --days 0 out of range"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != tc.code || !strings.HasPrefix(r.stderr, tc.want) {
			t.Errorf("%v: exit %d stderr %q; want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func TestVersionAndValidate(t *testing.T) {
	if r := runCLI(t, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "escractl ") {
		t.Fatalf("%+v", r)
	}
	r := runCLI(t, "validate", "-f", "../../../docs/examples/shop.yaml")
	if r.code != 0 || !strings.Contains(r.stdout, "app shop is valid: 4 containers") {
		t.Fatalf("%+v", r)
	}
	// web: 100m + (2 − 0.3)/4 cores; 64MiB + (0.9 × 1.5GiB − 320MiB)/4.
	// cache: (2 − 0.3)/4 cores; 128MiB + the same share.
	var web, cache string
	for _, l := range strings.Split(r.stdout, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "web":
			web = strings.Join(f, " ")
		case len(f) > 0 && f[0] == "cache":
			cache = strings.Join(f, " ")
		}
	}
	if web != "web escra-demo:latest 3 0.53 330MiB any" || cache != "cache escra-demo:latest 1 0.42 394MiB h2" {
		t.Errorf("bootstrap plan:\n%s", r.stdout)
	}
}
