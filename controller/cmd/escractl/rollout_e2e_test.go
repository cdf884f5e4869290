package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/controller/server"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
)

// The declarative apply on the real engine: the real escractl
// code, the real controller, a real escrad agent and the host's Docker
// engine. Changing replicas or image of a running app changes only the
// containers it must, one at a time, within the budget; the others keep
// their container IDs and start times.
func TestE2EDeclarativeApplyRollsOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (Docker, cgroups)")
	}
	dk := dockertest.Client(t, "")
	img := dockertest.WorkloadImage(t, dk)
	ctx := context.Background()
	var rnd [3]byte
	rand.Read(rnd[:])
	app := "cli-roll-" + hex.EncodeToString(rnd[:]) // cli- is this work's prefix on the shared engine
	img2 := "cli-roll/workloads:" + hex.EncodeToString(rnd[:])
	if _, err := dk.ImageTag(ctx, client.ImageTagOptions{Source: img, Target: img2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		removeApp(dk, app)
		_, _ = dk.ImageRemove(context.Background(), img2, client.ImageRemoveOptions{}) // the tag only
	})

	s, url := startController(t)
	startAgent(t, s.TCPAddr(), app)
	waitUntil(t, 10*time.Second, "escrad connected", func() bool { return len(s.Snapshot().Hosts) == 1 })
	ctl := []string{"--controller", url}

	specYAML := fmt.Sprintf(`name: %s
cpu: 1
memory: 512MiB
containers:
  - name: web
    image: %s
    command: [/bin/spin, -idle]
    replicas: 3
  - name: db
    image: %s
    command: [/bin/spin, -idle]
`, app, img, img)
	if r := runIn(t, specYAML, append(ctl, "apply", "-f", "-")...); r.code != 0 {
		t.Fatalf("apply: %+v", r)
	}
	before := running(t, dk, app)
	if len(before) != 4 {
		t.Fatalf("want 4 containers after the first apply, got %v", keys(before))
	}

	// The listing applies back unchanged: nothing touched.
	listing := runCLI(t, append(ctl, "get", "apps", app, "-o", "yaml")...)
	if r := runIn(t, listing.stdout, append(ctl, "apply", "-f", "-")...); r.code != 0 || !strings.Contains(r.stdout, "unchanged") {
		t.Fatalf("re-apply of the listing: %+v\n%s", r, listing.stdout)
	}
	same(t, before, running(t, dk, app), keys(before)...)

	// A watcher checks the budget while each rollout runs.
	watch := func() func() {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				for _, a := range s.Snapshot().Apps {
					if a.Name == app && (a.CPUAllocatedCores > a.CPUCores+1e-6 || a.MemoryAllocatedBytes > a.MemoryBytes) {
						t.Errorf("over budget mid-rollout: %.3f of %.3f cores, %d of %d bytes", a.CPUAllocatedCores, a.CPUCores, a.MemoryAllocatedBytes, a.MemoryBytes)
					}
				}
			}
		}()
		return func() { close(stop); wg.Wait() }
	}

	// Scale web 3 → 5: two containers created, the four others untouched.
	up := strings.Replace(listing.stdout, "replicas: 3", "replicas: 5", 1)
	done := watch()
	r := runIn(t, up, append(ctl, "apply", "-f", "-")...)
	done()
	t.Logf("scale up: %s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "2 created") {
		t.Fatalf("scale up: %+v", r)
	}
	now := running(t, dk, app)
	if len(now) != 6 || now[app+"-web-4"].id == "" || now[app+"-web-5"].id == "" {
		t.Fatalf("after scale up: %v", keys(now))
	}
	same(t, before, now, keys(before)...)
	waitMembers(t, s, app, 6)

	// Scale web 5 → 2: web-3, web-4, web-5 go; web-1, web-2 and db stay.
	down := strings.Replace(listing.stdout, "replicas: 3", "replicas: 2", 1)
	done = watch()
	r = runIn(t, down, append(ctl, "apply", "-f", "-")...)
	done()
	t.Logf("scale down: %s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "3 removed") {
		t.Fatalf("scale down: %+v", r)
	}
	now = running(t, dk, app)
	if len(now) != 3 {
		t.Fatalf("after scale down: %v", keys(now))
	}
	same(t, before, now, app+"-web-1", app+"-web-2", app+"-db")

	// New image for web: web-1 and web-2 replaced one at a time (one of
	// the two always runs), db untouched.
	newImg := strings.Replace(down, "image: "+img+"\n    command: [/bin/spin, -idle]\n    replicas: 2", "image: "+img2+"\n    command: [/bin/spin, -idle]\n    replicas: 2", 1)
	if newImg == down {
		// yaml may quote or order differently: change the first image line.
		newImg = strings.Replace(down, "image: "+img, "image: "+img2, 1)
	}
	stopWeb := make(chan struct{})
	minWeb := make(chan int, 1)
	go func() {
		low := 2
		for {
			select {
			case <-stopWeb:
				minWeb <- low
				return
			case <-time.After(30 * time.Millisecond):
			}
			n := 0
			for name := range running(t, dk, app) {
				if strings.HasPrefix(name, app+"-web-") {
					n++
				}
			}
			low = min(low, n)
		}
	}()
	done = watch()
	r = runIn(t, newImg, append(ctl, "apply", "-f", "-")...)
	done()
	close(stopWeb)
	t.Logf("new image: %s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "2 replaced") {
		t.Fatalf("image change: %+v\n%s", r, newImg)
	}
	if low := <-minWeb; low < 1 {
		t.Errorf("both web replicas were down at once during the rollout")
	}
	after := running(t, dk, app)
	same(t, before, after, app+"-db")
	for _, n := range []string{app + "-web-1", app + "-web-2"} {
		if after[n].id == "" || after[n].id == before[n].id || after[n].image != img2 {
			t.Errorf("%s not replaced with %s: %+v (before %+v)", n, img2, after[n], before[n])
		}
	}
	waitMembers(t, s, app, 3)
	if testing.Verbose() {
		for _, args := range [][]string{{"get", "apps", app, "-o", "yaml"}, {"describe", app}, {"get", "containers", app, "-o", "wide"}} {
			t.Logf("escractl %s:\n%s", strings.Join(args, " "), runCLI(t, append(ctl, args...)...).stdout)
		}
	}
	if r := runCLI(t, append(ctl, "get", "apps", app, "-o", "yaml")...); !strings.Contains(r.stdout, img2) || !strings.Contains(r.stdout, "replicas: 2") {
		t.Errorf("the listing does not show the applied spec:\n%s", r.stdout)
	}

	// An image no engine has: the first replacement fails, that replica
	// is put back with its previous template, the rest is untouched.
	good := running(t, dk, app)
	bad := strings.Replace(newImg, "image: "+img2, "image: cli-roll/none:1", 1)
	r = runIn(t, bad, append(ctl, "apply", "-f", "-")...)
	if r.code != 1 || !strings.Contains(r.stderr, "cli-roll/none:1") || !strings.Contains(r.stderr, "restored with its previous template") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("apply of a missing image: %+v", r)
	}
	now = running(t, dk, app)
	same(t, good, now, app+"-web-2", app+"-db")
	if w := now[app+"-web-1"]; w.id == "" || w.image != img2 {
		t.Errorf("web-1 not restored with %s: %+v", img2, w)
	}
	waitMembers(t, s, app, 3)
	if r := runCLI(t, append(ctl, "get", "apps", app, "-o", "yaml")...); !strings.Contains(r.stdout, img2) || strings.Contains(r.stdout, "cli-roll/none") {
		t.Errorf("after the failed rollout the listing should still show %s:\n%s", img2, r.stdout)
	}

	if r := runCLI(t, append(ctl, "delete", app)...); r.code != 0 {
		t.Fatalf("delete: %+v", r)
	}
	if left := running(t, dk, app); len(left) != 0 {
		t.Errorf("delete left %v", keys(left))
	}
}

type ctr struct {
	id, image string
	started   string
}

// running lists app's running containers on the engine by name.
func running(t *testing.T, dk *client.Client, app string) map[string]ctr {
	t.Helper()
	ctx := context.Background()
	list, err := dk.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]ctr{}
	for _, c := range list.Items {
		j, err := dockertest.Inspect(ctx, dk, c.ID)
		if err != nil || !j.State.Running {
			continue // going away
		}
		out[strings.TrimPrefix(j.Name, "/")] = ctr{id: c.ID, image: j.Config.Image, started: j.State.StartedAt}
	}
	return out
}

// same checks the named containers kept their IDs and start times.
func same(t *testing.T, a, b map[string]ctr, names ...string) {
	t.Helper()
	for _, n := range names {
		if a[n].id == "" || a[n] != b[n] {
			t.Errorf("%s was touched: before %+v, after %+v", n, a[n], b[n])
		}
	}
}

func keys(m map[string]ctr) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitMembers(t *testing.T, s *server.Server, app string, n int) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("%d members of %s", n, app), func() bool {
		k := 0
		for _, c := range s.Snapshot().Containers {
			if c.App == app {
				k++
			}
		}
		return k == n
	})
}

// startAgent runs escrad's agent against the host's engine, managing app only.
func startAgent(t *testing.T, ctl, app string) {
	t.Helper()
	cli, err := containers.NewDockerClient("unix://" + dockertest.Socket)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	a, err := agent.New(agent.Config{
		HostID: "cli-h1", Controller: ctl, Period: 100 * time.Millisecond,
		OOMDeadline: 200 * time.Millisecond, Heartbeat: 200 * time.Millisecond,
		Backend: agent.BackendCgroupfs, Docker: cli, Log: log,
		Apps: []string{app}, // other work on the shared engine is never touched
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); cli.Close() })
	<-a.Started()
}

// removeApp force-removes every container labelled escra.app=app.
func removeApp(dk *client.Client, app string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	list, _ := dk.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", containers.AppLabel+"="+app)})
	for _, c := range list.Items {
		_, _ = dk.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
}
