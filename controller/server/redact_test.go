package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/escra-dev/escra/controller/spec"
)

// Env values of an app's spec are "***" to a viewer and a scaler, on
// GET /v1/apps and /v1/state alike, and in clear to an admin; the
// running app keeps them.
func TestEnvRedactedForViewers(t *testing.T) {
	dir := pki(t, "h1")
	sc, ac := controllerTLS(t, dir)
	s := start(t, func(c *Config) { c.TLS, c.AdminTLS = sc, ac })
	doc := &spec.Doc{Name: "web", CPU: "2", Memory: "1GiB", Sigma: 0.5, Containers: []spec.DocContainer{
		{Name: "api", Image: "escra/demo", Replicas: 1, Network: "host", Env: map[string]string{"DB_PASSWORD": "hunter2", "MODE": "prod"}}}}
	if err := s.DefineApp(AppSpec{Name: "web", CPUCores: 2, MemoryBytes: 1 << 30, Sigma: 0.5, Spec: doc}); err != nil {
		t.Fatal(err)
	}
	envOf := func(who, path string) map[string]string {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, dir, who)}}
		resp, err := c.Get("https://" + s.AdminAddr() + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s GET %s: %v %v", who, path, resp, err)
		}
		defer resp.Body.Close()
		var apps []AppState
		if path == "/v1/state" {
			var st State
			err = json.NewDecoder(resp.Body).Decode(&st)
			apps = st.Apps
		} else {
			err = json.NewDecoder(resp.Body).Decode(&apps)
		}
		if err != nil || len(apps) != 1 || apps[0].Spec == nil || len(apps[0].Spec.Containers) != 1 {
			t.Fatalf("%s GET %s: %+v %v", who, path, apps, err)
		}
		return apps[0].Spec.Containers[0].Env
	}
	for _, path := range []string{"/v1/apps", "/v1/state"} {
		for _, who := range []string{"viewer", "scaler"} {
			if env := envOf(who, path); len(env) != 2 || env["DB_PASSWORD"] != "***" || env["MODE"] != "***" {
				t.Errorf("%s GET %s: env %v, want every value ***", who, path, env)
			}
		}
		if env := envOf("admin", path); env["DB_PASSWORD"] != "hunter2" || env["MODE"] != "prod" {
			t.Errorf("admin GET %s: env %v, want the values", path, env)
		}
	}
	if env := s.Snapshot().Apps[0].Spec.Containers[0].Env; env["DB_PASSWORD"] != "hunter2" {
		t.Fatalf("the running app's env changed: %v", env)
	}
}
