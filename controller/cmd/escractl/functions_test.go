package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/gateway"
)

// get functions and top --gateway read a real gateway's /v1/functions (its
// one replica is a plain HTTP server answering the queue proxy's health).
func TestGetAndTopFunctions(t *testing.T) {
	rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	defer rep.Close()
	addr := strings.TrimPrefix(rep.URL, "http://")
	f := gateway.Function{Name: "hello", CPUCores: 0.1, MemoryBytes: 64 << 20, Concurrency: 2, SLO: time.Second,
		Autoscaler: mu.ASMu, LB: mu.LBMu, MinReplicas: 1, MaxReplicas: 1}
	g, err := gateway.New([]gateway.Function{f}, &gateway.StaticScaler{Replicas: []gateway.Replica{{ID: "r1", Addr: addr}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.Tick(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for g.Statuses()[0].Ready != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	adm := httptest.NewServer(g.AdminHandler())
	defer adm.Close()

	r := runCLI(t, "get", "functions", "--gateway", adm.URL)
	if r.code != 0 || !strings.Contains(r.stdout, "hello") || !strings.Contains(r.stdout, "1+0") {
		t.Fatalf("get functions: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "top", "hello", "--gateway", adm.URL, "--once")
	if r.code != 0 || !strings.Contains(r.stdout, "hello/r1") {
		t.Fatalf("top --gateway: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "get", "functions", "nope", "--gateway", adm.URL)
	if r.code != 1 || r.stderr != "escractl: unknown function \"nope\"\n" {
		t.Fatalf("unknown function: %d %q", r.code, r.stderr)
	}
	// A gateway that is not there: one line, non-zero.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if r = runCLI(t, "get", "functions", "--gateway", dead); r.code == 0 || !strings.Contains(r.stderr, "unreachable") {
		t.Fatalf("dead gateway: %d %q", r.code, r.stderr)
	}
	resp, err := http.Get(adm.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if !strings.Contains(b.String(), `escra_mu_replicas{function="hello"} 1`) {
		t.Fatalf("/metrics lacks the replica gauge:\n%s", b.String())
	}
}
