package containers

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/client"
)

// Pull fetches ref into the engine when its registry is one of allowed
// (host:port as written in the reference, e.g. 127.0.0.1:5000): nothing
// is ever fetched from a registry the operator did not name, so a bare
// "nginx" never reaches Docker Hub. It waits for the whole pull, reading
// the engine's progress stream for its error.
func Pull(ctx context.Context, cli *client.Client, ref string, allowed []string) (time.Duration, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return 0, fmt.Errorf("image %q: %w", ref, err)
	}
	if dom := reference.Domain(named); !slices.Contains(allowed, dom) {
		return 0, fmt.Errorf("image %s is not on engine %s and its registry %s is not one escrad pulls from (--pull-registries)", ref, cli.DaemonHost(), dom)
	}
	t0 := time.Now()
	rc, err := cli.ImagePull(ctx, reference.TagNameOnly(named).String(), client.ImagePullOptions{})
	if err != nil {
		return 0, fmt.Errorf("pull %s: %w", ref, err)
	}
	defer rc.Close()
	if err := rc.Wait(ctx); err != nil {
		return 0, fmt.Errorf("pull %s: %w", ref, err)
	}
	return time.Since(t0), nil
}
