package imageresolve

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/internal/dockertest"
)

// The chain ids the controller computes are the ones the engine stores
// its layers under: a multi-layer image goes into the real engine, comes
// back out of `docker save`, its layer tars hash to the config's diff-ids,
// and every chain id computed from those is a directory of the engine's
// layer database.
func TestChainIDsMatchTheEngine(t *testing.T) {
	cli := dockertest.Client(t, "")
	ctx := context.Background()
	res, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := res.Info
	layerdb := filepath.Join(info.DockerRootDir, "image", info.Driver, "layerdb", "sha256")
	if _, err := os.Stat(layerdb); err != nil {
		t.Skipf("engine layer database %s not readable (needs root): %v", layerdb, err)
	}
	ref := "dep-chaintest:" + strings.ToLower(dockertest.UniqueName("t"))
	specs := []dockertest.LayerSpec{{Seed: 1, Size: 4096}, {Seed: 2, Size: 1000}, {Seed: 3, Size: 70000}}
	id, err := dockertest.LoadLayered(ctx, cli, ref, nil, specs, []string{"/none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), id, client.ImageRemoveOptions{Force: true}) })

	rc, err := cli.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			files[h.Name] = b
		}
	}
	var man []struct {
		Config string
		Layers []string
	}
	if err := json.Unmarshal(files["manifest.json"], &man); err != nil || len(man) != 1 {
		t.Fatalf("docker save manifest: %v (%d entries)", err, len(man))
	}
	var cfg struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(files[man[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 3 || len(man[0].Layers) != 3 {
		t.Fatalf("saved image has %d diff-ids, %d layers; want 3", len(cfg.RootFS.DiffIDs), len(man[0].Layers))
	}
	for i, p := range man[0].Layers {
		sum := sha256.Sum256(files[p])
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != cfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: tar hashes to %s, config says %s", i, got, cfg.RootFS.DiffIDs[i])
		}
	}
	chains := placement.ChainIDs(cfg.RootFS.DiffIDs)
	for i, c := range chains {
		if _, err := os.Stat(filepath.Join(layerdb, strings.TrimPrefix(c, "sha256:"))); err != nil {
			t.Errorf("chain id %d (%s) is not in the engine's layer database: %v", i, c, err)
		}
	}
	// And what escrad reports (ImageInspect) gives the same host state.
	ins, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	h := HostDeps([]ImageReport{{ID: ins.ID, Names: ins.RepoTags, DiffIDs: ins.RootFS.Layers}})
	for _, c := range chains {
		if !h.Chains[c] {
			t.Errorf("inspect-derived host state lacks chain %s", c)
		}
	}
	if norm, _ := Normalize(ref); !h.Images[norm] || !h.Images[id] {
		t.Errorf("host state lacks the image by name %s or id %s", norm, id)
	}
}
