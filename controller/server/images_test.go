package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/escra-dev/escra/internal/simdaemon"
	pb "github.com/escra-dev/escra/proto/escrapb"
	"github.com/escra-dev/escra/proto/wire"
)

func sendImages(t *testing.T, d *simdaemon.Daemon, st *pb.ImageState) {
	t.Helper()
	var buf bytes.Buffer
	if err := wire.NewEnvelopeWriter(&buf).Write(&pb.Envelope{Body: &pb.Envelope_ImageState{ImageState: st}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SendRaw(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// The deployer places where the image's dependencies are (dependency-aware scheduling):
// by normalised name when the image cannot be resolved, by layers when
// the registry's manifest says which ones it has; replicas still spread.
func TestDeployerPlacesByImageState(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/team/app/manifests/v1", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
			"config": map[string]any{"digest": "sha256:cfg"},
			"layers": []any{map[string]any{"digest": "sha256:z1", "size": 900}, map[string]any{"digest": "sha256:z2", "size": 100}}})
	})
	mux.HandleFunc("/v2/team/app/blobs/sha256:cfg", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"rootfs": map[string]any{"diff_ids": []string{"sha256:base", "sha256:top"}}})
	})
	reg := httptest.NewServer(mux)
	defer reg.Close()
	regHost := strings.TrimPrefix(reg.URL, "http://")
	s := start(t, func(c *Config) { c.ResolveRegistries = []string{regHost} })
	h1, h2, h3 := dial(t, s, "h1", 2), dial(t, s, "h2", 2), dial(t, s, "h3", 2)
	_ = h1
	eventually(t, "3 hosts", func() bool { return len(s.Snapshot().Hosts) == 3 })
	// h2 holds busybox by its short name; h3 holds another image built on
	// the same 900-byte base layer as team/app:v1.
	sendImages(t, h2, &pb.ImageState{Images: []*pb.ImageInfo{{Id: "sha256:bb", Names: []string{"busybox:latest"}, DiffIds: []string{"sha256:x"}}}})
	sendImages(t, h3, &pb.ImageState{Images: []*pb.ImageInfo{{Id: "sha256:o", Names: []string{regHost + "/team/other:1"}, DiffIds: []string{"sha256:base", "sha256:own"}}}})
	eventually(t, "image state", func() bool {
		var n int
		s.hosts.Range(func(_, v any) bool {
			if v.(*host).deps.Load() != nil {
				n++
			}
			return true
		})
		return n == 2
	})
	if err := s.DefineApp(AppSpec{Name: "a", CPUCores: 4, MemoryBytes: 4 << 30, Sigma: 0.1}); err != nil {
		t.Fatal(err)
	}
	c := func(name, img string) DeployContainer {
		return DeployContainer{Name: name, Image: img, CPUCores: 0.1, MemoryBytes: 64 << 20}
	}
	hostsOf := func(cs ...DeployContainer) string {
		t.Helper()
		plan, err := s.place("a", cs)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range plan {
			got = append(got, p.host.hello.GetHostId())
		}
		return strings.Join(got, " ")
	}
	if got := hostsOf(c("w", "docker.io/library/busybox")); got != "h2" {
		t.Errorf("busybox placed on %s, want h2 (holds it under its short name)", got)
	}
	if got := hostsOf(c("w", regHost+"/team/app:v1")); got != "h3" {
		t.Errorf("team/app:v1 placed on %s, want h3 (holds 90 %% of its bytes)", got)
	}
	// Spreading the app's replicas still comes first.
	if got := hostsOf(c("w1", regHost+"/team/app:v1"), c("w2", regHost+"/team/app:v1"), c("w3", regHost+"/team/app:v1")); got != "h3 h1 h2" {
		t.Errorf("three replicas placed on %s, want h3 first, then the others", got)
	}
	// A report past the bounds is refused.
	if err := checkImageState(&pb.ImageState{Images: []*pb.ImageInfo{{Id: "sha256:o", DiffIds: make([]string, maxImageLayers+1)}}}); err == nil {
		t.Error("an image of too many layers was accepted")
	}
	if err := checkImageState(&pb.ImageState{Images: []*pb.ImageInfo{{Id: strings.Repeat("x", maxImageString+1)}}}); err == nil {
		t.Error("an oversized image id was accepted")
	}
}
