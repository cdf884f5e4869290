package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"time"

	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/jsonmessage"
)

// LayerSpec is one synthetic layer: a single file of incompressible
// bytes drawn from Seed, so the same spec is byte-identical (the same
// diff-id) in every image that lists it: a shared layer.
type LayerSpec struct {
	Seed int64
	Size int
}

// LayerTar returns the layer's tar (its sha256 is the diff-id).
func (l LayerSpec) LayerTar() []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := make([]byte, l.Size)
	rand.New(rand.NewSource(l.Seed)).Read(data)
	_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("layers/%d", l.Seed), Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)})
	_, _ = tw.Write(data)
	_ = tw.Close()
	return buf.Bytes()
}

// LoadLayered loads into the engine an image named ref whose layers are
// base (a tar, e.g. the workloads' binaries; nil: none) then the given
// synthetic layers, in Docker's `docker save` format, and returns its id.
// Nothing is pulled or built: `docker load` of a tarball made here.
func LoadLayered(ctx context.Context, cli *client.Client, ref string, base []byte, layers []LayerSpec, entrypoint []string) (string, error) {
	tars := [][]byte{}
	if base != nil {
		tars = append(tars, base)
	}
	for _, l := range layers {
		tars = append(tars, l.LayerTar())
	}
	var diffIDs, paths []string
	var hist []map[string]any
	for i, t := range tars {
		sum := sha256.Sum256(t)
		diffIDs = append(diffIDs, "sha256:"+hex.EncodeToString(sum[:]))
		paths = append(paths, fmt.Sprintf("l%d/layer.tar", i))
		hist = append(hist, map[string]any{"created": "1970-01-01T00:00:00Z", "created_by": fmt.Sprintf("escra synthetic layer %d", i)})
	}
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
		"config":  map[string]any{"Entrypoint": entrypoint, "Labels": map[string]string{"org.escra.test": "1"}},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": diffIDs},
		"history": hist,
	})
	if err != nil {
		return "", err
	}
	csum := sha256.Sum256(cfg)
	id := hex.EncodeToString(csum[:])
	man, _ := json.Marshal([]map[string]any{{"Config": id + ".json", "RepoTags": []string{ref}, "Layers": paths}})

	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		put := func(name string, b []byte) error {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
			_, err := tw.Write(b)
			return err
		}
		err := put(id+".json", cfg)
		for i := 0; err == nil && i < len(tars); i++ {
			err = put(paths[i], tars[i])
		}
		if err == nil {
			err = put("manifest.json", man)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, err := cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("docker load %s: %w", ref, err)
	}
	defer resp.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp, io.Discard, 0, false, nil); err != nil {
		return "", fmt.Errorf("docker load %s: %w", ref, err)
	}
	return "sha256:" + id, nil
}

// WorkloadsLayer is the tar of the workloads' static binaries (bin/spin,
// bin/memhog, tmp/), a base layer for synthetic images.
func WorkloadsLayer() ([]byte, error) {
	return workloadsTar()
}
