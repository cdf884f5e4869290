package imageresolve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/escra-dev/escra/controller/placement"
)

func TestNormalize(t *testing.T) {
	// Docker's rules (dependency-aware scheduling §4.2): implicit docker.io, library/ for
	// one-component names on Docker Hub, :latest without tag or digest.
	cases := []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"library/busybox", "docker.io/library/busybox:latest"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/library/busybox:1", "docker.io/library/busybox:1"},
		{"user/app", "docker.io/user/app:latest"},
		{"127.0.0.1:5000/dep-img3", "127.0.0.1:5000/dep-img3:latest"},
		{"localhost/app:v2", "localhost/app:v2"},
		{"ghcr.io/org/team/app:1.0", "ghcr.io/org/team/app:1.0"},
		{"busybox@sha256:" + strings.Repeat("a", 64), "docker.io/library/busybox@sha256:" + strings.Repeat("a", 64)},
	}
	for _, c := range cases {
		got, err := Normalize(c.in)
		if err != nil || got != c.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "BusyBox", "a:b:c", "app@sha256:short", " spaced"} {
		if _, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%q) accepted", bad)
		}
	}
}

// A registry's two answers the resolver reads: a manifest (behind a
// manifest list) and the config blob.
func TestResolveFromRegistryManifestAndCache(t *testing.T) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, mt string, v any) {
		w.Header().Set("Content-Type", mt)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/v2/team/app/manifests/v1", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !strings.Contains(r.Header.Get("Accept"), mtDockerManifest) {
			http.Error(w, "no accept", 400)
			return
		}
		write(w, mtDockerList, map[string]any{"schemaVersion": 2, "mediaType": mtDockerList, "manifests": []any{
			map[string]any{"mediaType": mtDockerManifest, "digest": "sha256:arm", "platform": map[string]string{"os": "linux", "architecture": "arm64"}},
			map[string]any{"mediaType": mtDockerManifest, "digest": "sha256:amd", "platform": map[string]string{"os": "linux", "architecture": "amd64"}},
		}})
	})
	mux.HandleFunc("/v2/team/app/manifests/sha256:amd", func(w http.ResponseWriter, r *http.Request) {
		write(w, mtDockerManifest, map[string]any{"schemaVersion": 2, "mediaType": mtDockerManifest,
			"config": map[string]any{"digest": "sha256:cfg", "size": 100},
			"layers": []any{map[string]any{"digest": "sha256:gz1", "size": 1000}, map[string]any{"digest": "sha256:gz2", "size": 500}}})
	})
	mux.HandleFunc("/v2/team/app/blobs/sha256:cfg", func(w http.ResponseWriter, r *http.Request) {
		write(w, "application/json", map[string]any{"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:d1", "sha256:d2"}}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://")
	r := &Resolver{Registries: []string{reg}}
	d, err := r.Resolve(context.Background(), reg+"/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	want := placement.ImageDeps{Name: reg + "/team/app:v1", ID: "sha256:cfg", Size: 1500,
		Layers: []placement.Layer{{DiffID: "sha256:d1", Size: 1000}, {DiffID: "sha256:d2", Size: 500}}}
	if d.Name != want.Name || d.ID != want.ID || d.Size != want.Size || len(d.Layers) != 2 || d.Layers[0] != want.Layers[0] || d.Layers[1] != want.Layers[1] {
		t.Fatalf("resolved %+v, want %+v", d, want)
	}
	if len(d.ChainIDs) != 2 || d.ChainIDs[0] != "sha256:d1" {
		t.Errorf("chain ids %v", d.ChainIDs)
	}
	if _, err := r.Resolve(context.Background(), reg+"/team/app:v1"); err != nil || hits.Load() != 1 {
		t.Errorf("second resolve: err %v, registry asked %d times (want the cache)", err, hits.Load())
	}
	// Unknown tag: an error, and the name alone for image-match.
	if d, err := r.Resolve(context.Background(), reg+"/team/app:nope"); err == nil || d.Name != reg+"/team/app:nope" {
		t.Errorf("missing tag: %+v, %v", d, err)
	}
	// A registry not listed is never contacted.
	if d, err := r.Resolve(context.Background(), "busybox"); !errors.Is(err, ErrNotAllowed) || d.Name != "docker.io/library/busybox:latest" {
		t.Errorf("docker hub image: %+v, %v", d, err)
	}
}

func TestHostDepsFromReport(t *testing.T) {
	h := HostDeps([]ImageReport{{ID: "sha256:cfg", Names: []string{"busybox:latest", "<none>:<none>"}, DiffIDs: []string{"sha256:a", "sha256:b"}}})
	req := &placement.ImageDeps{Name: "docker.io/library/busybox:latest"}
	if !h.HasImage(req) || !h.Layers["sha256:b"] || !h.Chains[placement.ChainIDs([]string{"sha256:a", "sha256:b"})[1]] {
		t.Errorf("host deps %+v", h)
	}
}
