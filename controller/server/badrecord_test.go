package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/escra-dev/escra/controller/store"
	"github.com/escra-dev/escra/internal/etcdtest"
)

// A garbage value under the controller's prefix in a real etcd (not JSON,
// and a JSON record that defines no valid app) is skipped at load: one
// log line with its key each, escra_store_bad_records_total 2, and the
// controller keeps leading, in one term, with the good app. Failing the
// load made every candidate step down in turn.
func TestBadStoredRecordSkippedWithAlarm(t *testing.T) {
	e := etcdtest.Start(t)
	st := etcdStore(t, e)
	ctx := context.Background()
	if err := st.Put(ctx, store.Record{Spec: AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + e.Endpoint}, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	junk := store.DefaultEtcdPrefix + "apps/junk"
	bad := store.DefaultEtcdPrefix + "apps/neg"
	for k, v := range map[string]string{junk: "\x00not a record{", bad: `{"spec":{"name":"neg","cpu_cores":-1,"memory_bytes":1}}`} {
		if _, err := raw.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuf
	s := start(t, func(c *Config) {
		c.Store, c.Elector, c.LeaderTTL = st, st, 2*time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	eventually(t, "leading", func() bool { ok, _ := s.Leading(); return ok })
	_, term := s.Leading()
	// Past the lease TTL: a failed load would have stepped down by now.
	time.Sleep(3 * time.Second)
	if ok, now := s.Leading(); !ok || now != term {
		t.Fatalf("leading %v, term %d → %d: the bad records made the controller step down", ok, term, now)
	}
	apps := s.Snapshot().Apps
	if len(apps) != 1 || apps[0].Name != "web" || apps[0].CPUCores != 2 {
		t.Fatalf("apps served: %+v", apps)
	}
	for _, key := range []string{junk, "neg"} {
		if n := strings.Count(logs.String(), "stored record skipped"); n != 2 || !strings.Contains(logs.String(), "key="+key) {
			t.Fatalf("log lines for %s: %d skipped lines\n%s", key, n, logs.String())
		}
	}
	if m := scrape(t, s); !strings.Contains(m, "escra_store_bad_records_total 2\n") {
		t.Fatalf("no escra_store_bad_records_total 2 in /metrics:\n%s", grepLines(m, "escra_store"))
	}
	// Applying the app again replaces its bad record.
	if err := s.DefineApp(AppSpec{Name: "neg", CPUCores: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatalf("define over a bad record: %v", err)
	}
	if r, ok, err := st.Get(ctx, "neg"); err != nil || !ok || r.Spec.CPUCores != 1 {
		t.Fatalf("the record after the define: %+v %v %v", r, ok, err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
