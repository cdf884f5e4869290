// Command bench-images builds the benchmark images into the engine at
// DOCKER_HOST (default socket) and prints {"name": "tag", ...} as JSON.
// Building is idempotent: images are tagged by content hash.
//
//	bench-images [NAME...]   only these (spin, memwave, ...: the name after escra-bench/)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/internal/workloadimages"
)

func main() {
	root, err := workloadimages.RepoRoot(".")
	if err != nil {
		fail(err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := &workloadimages.Builder{Docker: cli, RepoRoot: root, Log: func(s string) { fmt.Fprintln(os.Stderr, "bench-images:", s) }}
	var tags map[string]string
	if len(os.Args) > 1 {
		tags, err = buildSome(ctx, b, os.Args[1:])
	} else {
		tags, err = b.BuildAll(ctx)
	}
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(tags)
}

// buildSome builds the named images of workloadimages.All.
func buildSome(ctx context.Context, b *workloadimages.Builder, names []string) (map[string]string, error) {
	tags := map[string]string{}
	for _, n := range names {
		var spec *workloadimages.Spec
		for i, s := range workloadimages.All {
			if s.Name == n || s.Name == "escra-bench/"+n {
				spec = &workloadimages.All[i]
			}
		}
		if spec == nil {
			return nil, fmt.Errorf("unknown image %q (want one of spin, memwave, demo-http, nginx, redis)", n)
		}
		t, err := b.Build(ctx, *spec)
		if err != nil {
			return nil, err
		}
		tags[spec.Name] = t
	}
	return tags, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-images:", err)
	os.Exit(1)
}
