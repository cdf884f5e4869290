package main

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/auth"
	"github.com/escra-dev/escra/internal/etcdtest"
)

// etcd as HA operators run it: client certificates required (etcd
// --client-cert-auth) and auth enabled, one etcd user per controller named
// by its certificate's common name, with a role on /escra/ only. The real
// controller binary refuses plain etcd:// without --insecure-store, refuses
// an etcd whose auth is off and a certificate of etcd's root user, and
// leads and stores its apps with its own user.
func TestEtcdTLSAndRBACRequired(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.Generate(dir, []string{"ctl-a", "root"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.StartTLS(t, &etcdtest.TLS{CA: auth.CAPath(dir), Cert: auth.CertPath(dir, "controller"), Key: auth.KeyPath(dir, "controller")})
	bin := buildController(t)
	rootTLS, err := store.EtcdTLS(auth.CAPath(dir), auth.CertPath(dir, "root"), auth.KeyPath(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + e.Endpoint}, TLS: rootTLS, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// What etcdctl role add / role grant-permission --prefix / user add /
	// user grant-role / auth enable do.
	steps := []func() error{
		func() error { _, err := root.RoleAdd(ctx, "escra"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "escra", "/escra/", clientv3.GetPrefixRangeEnd("/escra/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "ctl-a", "unused-password"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "ctl-a", "escra"); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("etcd RBAC step %d: %v", i, err)
		}
	}
	base := []string{"--insecure", "--listen", "127.0.0.1:0", "--telemetry-listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--reclaim-every", "0", "--store", e.URL(), "--leader-ttl", "2s"}
	certArgs := func(name string) []string {
		return []string{"--etcd-cacert", auth.CAPath(dir), "--etcd-cert", auth.CertPath(dir, name), "--etcd-key", auth.KeyPath(dir, name)}
	}
	refused := func(what, want string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), want) {
			t.Fatalf("%s: %v, want exit 2 and one line with %q: %q", what, err, want, out)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(string(out)))
	}
	refused("plain etcd:// without --insecure-store", "--etcd-cacert, --etcd-cert and --etcd-key", base...)
	refused("TLS, etcd's auth off", "auth is off", append(base, certArgs("ctl-a")...)...)
	if _, err := root.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	refused("etcd's root user", "root role", append(base, certArgs("root")...)...)

	_, _, admin := startController(t, bin, append(base, certArgs("ctl-a")...)...)
	for t0 := time.Now(); adminGet(t, admin, "/v1/apps", nil) != 200; time.Sleep(20 * time.Millisecond) {
		if time.Since(t0) > 10*time.Second {
			t.Fatal("the controller with its own etcd user never led")
		}
	}
	req, _ := http.NewRequest("PUT", "http://"+admin+"/v1/apps/web", strings.NewReader(`{"name":"web","cpu_cores":2,"memory_bytes":1073741824,"sigma":0.5}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT: %v %v", resp, err)
	}
	resp.Body.Close()
	got, err := root.Get(ctx, store.DefaultEtcdPrefix+"apps/web")
	if err != nil || len(got.Kvs) != 1 || !strings.Contains(string(got.Kvs[0].Value), `"cpu_cores":2`) {
		t.Fatalf("the stored record, read as root: %v %v", got, err)
	}
}
