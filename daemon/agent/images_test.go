package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/peer"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// On a private engine: escrad reports its images with their RootFS
// diff-ids on connect and again after an image event (dependency-aware scheduling §5.1–5.2),
// and its image budget removes the least recently used images no
// container uses, never one a container uses.
func TestImageStateAndBudgetOnAnEngine(t *testing.T) {
	dockertest.Client(t, "") // skip without an engine
	eng := dockertest.StartEngine(t, "dep-images")
	cli := dockertest.Client(t, eng.Host)
	ctx := context.Background()
	base := dockertest.LayerSpec{Seed: 1, Size: 256 << 10}
	load := func(ref string, ls ...dockertest.LayerSpec) string {
		t.Helper()
		id, err := dockertest.LoadLayered(ctx, cli, ref, nil, ls, []string{"/none"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	idA := load("dep-a:1", base, dockertest.LayerSpec{Seed: 2, Size: 128 << 10})
	idB := load("dep-b:1", base, dockertest.LayerSpec{Seed: 3, Size: 128 << 10})
	idC := load("dep-c:1", dockertest.LayerSpec{Seed: 4, Size: 256 << 10})

	p, err := peer.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	run(t, Config{HostID: "h1", Controller: p.Addr(), Period: 100 * time.Millisecond, OOMDeadline: 200 * time.Millisecond, Docker: cli})
	report := func(n int) *pb.ImageState {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if st, _ := p.Images(); st != nil && len(st.Images) == n {
				return st
			}
			time.Sleep(50 * time.Millisecond)
		}
		st, k := p.Images()
		t.Fatalf("no report of %d images (last of %d reports: %v)", n, k, st)
		return nil
	}
	st := report(3)
	diff := func(l dockertest.LayerSpec) string {
		sum := sha256.Sum256(l.LayerTar())
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	for _, im := range st.Images {
		if im.Id == idA {
			if len(im.DiffIds) != 2 || im.DiffIds[0] != diff(base) || len(im.Names) == 0 || im.Names[0] != "dep-a:1" || im.SizeBytes <= 0 {
				t.Errorf("image A reported as %v", im)
			}
		}
	}
	if st.StoreBytes <= 0 {
		t.Errorf("store bytes %d", st.StoreBytes)
	}
	load("dep-d:1", dockertest.LayerSpec{Seed: 5, Size: 4096})
	report(4) // after the load event, without a reconnect

	// The budget: C was never used, B before A; a container holds A.
	a, err := New(Config{HostID: "h1", Controller: "127.0.0.1:1", Docker: cli, Backend: BackendCgroupfs,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.touchImage("dep-b:1")
	time.Sleep(5 * time.Millisecond)
	a.touchImage("dep-a:1")
	a.touchImage("dep-d:1")
	full, err := a.readImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	has := func(id string) bool { _, err := cli.ImageInspect(ctx, id); return err == nil }
	a.cfg.ImageBudget = full.StoreBytes - 1 // one image must go: C, never used
	if err := a.refreshImages(ctx); err != nil {
		t.Fatal(err)
	}
	if has(idC) || !has(idA) || !has(idB) {
		t.Fatalf("over budget by a byte: C gone %v, A kept %v, B kept %v; want only C removed", !has(idC), has(idA), has(idB))
	}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: "dep-a:1"}, HostConfig: &container.HostConfig{NetworkMode: "none"}, Name: "dep-holder"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	})
	a.cfg.ImageBudget = 1 // everything that may go goes, in LRU order
	if err := a.refreshImages(ctx); err != nil {
		t.Fatal(err)
	}
	if has(idB) || !has(idA) {
		t.Errorf("budget of 1 byte: B gone %v, A (used by a container) kept %v", !has(idB), has(idA))
	}
	_, _ = cli.ImageRemove(ctx, idA, client.ImageRemoveOptions{Force: true})
}
