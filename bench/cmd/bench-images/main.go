// Command bench-images builds the benchmark images into the engine at
// DOCKER_HOST (default socket) and prints {"name": "tag", ...} as JSON.
// Building is idempotent: images are tagged by content hash.
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
	tags, err := b.BuildAll(ctx)
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(tags)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-images:", err)
	os.Exit(1)
}
