package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/server"
)

// TestAgainstController runs the CLI against the real controller's admin
// API (controller/server on loopback ports), so the JSON both sides speak
// stays the same.
func TestAgainstController(t *testing.T) {
	cfg := server.DefaultConfig()
	cfg.TCPAddr, cfg.UDPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ReclaimEvery = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := "http://" + s.AdminAddr()

	// shop.yaml has an allocator section: its parameters reach the app.
	if r := runCLI(t, "--controller", url, "apply", "--budget-only", "-f", "../../../docs/examples/shop.yaml"); r.code != 0 {
		t.Fatalf("apply shop: %s", r.stderr)
	}
	// minimal.yaml has none: the controller's defaults apply.
	if r := runCLI(t, "--controller", url, "apply", "--budget-only", "-f", "../../../docs/examples/minimal.yaml"); r.code != 0 {
		t.Fatalf("apply hello: %s", r.stderr)
	}
	// batch.yaml sets κ, γ, Υ.
	if r := runCLI(t, "--controller", url, "apply", "--budget-only", "-f", "../../../docs/examples/batch.yaml"); r.code != 0 {
		t.Fatalf("apply batch: %s", r.stderr)
	}
	r := runCLI(t, "--controller", url, "get", "apps", "-o", "json")
	var items []map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &items) != nil || len(items) != 3 || items[2]["name"] != "shop" || items[2]["memory"] != "1.5GiB" {
		t.Fatalf("get apps -o json: %+v", r)
	}
	c, _ := adminclient.New(url)
	apps, err := c.Apps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]adminclient.App{}
	for _, a := range apps {
		byName[a.Name] = a
	}
	shop, batch := byName["shop"], byName["batch"]
	if shop.CPUCores != 2 || shop.MemoryBytes != 1536<<20 || shop.Sigma != 0.1 || shop.Params.Kappa != 0.8 {
		t.Errorf("shop on the controller: %+v", shop)
	}
	if batch.Params.Upsilon != 35 || batch.Params.Kappa != 0.6 || batch.Params.Gamma != 0.1 || batch.Sigma != 0.2 {
		t.Errorf("batch parameters did not reach the controller: %+v", batch.Params)
	}
	if byName["hello"].Params != cfg.Params {
		t.Errorf("hello should use the controller's parameters: %+v", byName["hello"].Params)
	}
	// Re-applying is fine (idempotent), a changed budget is taken.
	if r := runCLI(t, "--controller", url, "apply", "--budget-only", "-f", "../../../docs/examples/shop.yaml"); r.code != 0 {
		t.Fatalf("re-apply: %s", r.stderr)
	}
	for _, args := range [][]string{{"get", "apps"}, {"get", "containers"}, {"get", "hosts"}, {"top", "--once"}, {"top", "shop", "--once"}} {
		if r := runCLI(t, append([]string{"--controller", url}, args...)...); r.code != 0 {
			t.Errorf("%v: %s", args, r.stderr)
		}
	}
	r = runCLI(t, "--controller", url, "get", "apps")
	if !strings.Contains(r.stdout, "shop") || !strings.Contains(r.stdout, "1.5GiB") {
		t.Errorf("get apps:\n%s", r.stdout)
	}
	if r := runCLI(t, "--controller", url, "top", "nope", "--once"); r.code != 1 || r.stderr != "escractl: unknown app \"nope\"\n" {
		t.Errorf("top of an unknown app: %+v", r)
	}
	// Deploying with no host connected fails in one line and leaves no app behind.
	if r := runCLI(t, "--controller", url, "apply", "-f", writeSpec(t, "name: fresh\ncpu: 1\nmemory: 256MiB\ncontainers: [{name: x, image: y}]\n")); r.code != 1 ||
		!strings.Contains(r.stderr, "no host is connected") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("apply without hosts: %+v", r)
	}
	if r := runCLI(t, "--controller", url, "delete", "shop"); r.code != 0 {
		t.Errorf("delete: %+v", r)
	}
	if r := runCLI(t, "--controller", url, "delete", "shop"); r.code != 1 || r.stderr != "escractl: unknown app \"shop\"\n" {
		t.Errorf("second delete: %+v", r)
	}
	for _, a := range s.Snapshot().Apps {
		if a.Name == "shop" || a.Name == "fresh" {
			t.Errorf("app %s left behind", a.Name)
		}
	}
}
