package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"github.com/moby/moby/client/pkg/jsonmessage"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/imageresolve"
	"github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/internal/dockertest"
)

// The real benchmark (dependency-aware scheduling §7.1 at this machine's
// scale): engines started by scripts/hosts.sh, Debian's docker-registry on 127.0.0.1:5000,
// a corpus of synthetic multi-layer images with shared bases, Poisson
// submissions through the controller's admin API (what escractl apply
// calls), startup = submission to the container running and registered,
// the pull time logged apart. Every policy starts from empty engines.

var (
	registry   = flag.String("registry", "127.0.0.1:5000", "registry the images are pushed to and pulled from")
	binDir     = flag.String("bin", "bin", "directory of escrad and escra-controller")
	realHosts  = flag.Int("real-hosts", 3, "engines")
	realN      = flag.Int("real-n", 40, "submissions per policy")
	realRate   = flag.Float64("real-rate", 0.5, "submissions per second (Poisson)")
	realBudget = flag.Int64("real-budget", 150<<20, "escrad --image-budget per engine, bytes")
	realLimit  = flag.Float64("real-link", 8<<20, "bytes per second per connection of the rate-limiting proxy engines pull through (0: pull from the registry directly)")
	realPols   = flag.String("real-policies", "random,image-match,layer-match,prefix-match", "placement policies to compare")
)

const hostsName, hostsTag = "dep-hosts", "dep-"

// The corpus: families share a base layer, runtimes within a family share
// a second, every image has its own top layer; the workloads' binaries are
// the bottom layer of all (a distribution base).
const (
	families, runtimes, appsPer = 4, 2, 3
	baseMB, runtimeMB, appMB    = 24, 12, 6
)

type realImage struct {
	ref  string
	deps *placement.ImageDeps
}

func imageRef(i int) string { return fmt.Sprintf("%s/dep-v2-img%02d:latest", *registry, i) }

func buildCorpus(ctx context.Context, cli *client.Client) ([]realImage, error) {
	base, err := dockertest.WorkloadsLayer()
	if err != nil {
		return nil, err
	}
	res := &imageresolve.Resolver{Registries: []string{*registry}}
	var out []realImage
	i := 0
	t0 := time.Now()
	for f := 0; f < families; f++ {
		for r := 0; r < runtimes; r++ {
			for a := 0; a < appsPer; a++ {
				ref := imageRef(i)
				layers := []dockertest.LayerSpec{
					{Seed: int64(1000 + f), Size: baseMB << 20},
					{Seed: int64(2000 + 10*f + r), Size: runtimeMB << 20},
					{Seed: int64(3000 + i), Size: appMB << 20},
				}
				if a == appsPer-1 {
					// A tools layer every family's last app carries at
					// the top: shared by diff-id but never as a chain
					// prefix, where layer-match and prefix-match differ.
					layers[2] = dockertest.LayerSpec{Seed: 4000, Size: appMB << 20}
				}
				// Content is deterministic: an image already in the
				// registry is the same image.
				d, err := res.Resolve(ctx, ref)
				if err != nil {
					if _, err := dockertest.LoadLayered(ctx, cli, ref, base, layers, []string{"/bin/spin"}); err != nil {
						return nil, err
					}
					if err := push(ctx, cli, ref); err != nil {
						return nil, err
					}
					_, _ = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
					res = &imageresolve.Resolver{Registries: []string{*registry}} // no cached failure
					if d, err = res.Resolve(ctx, ref); err != nil {
						return nil, fmt.Errorf("pushed %s but cannot resolve it: %w", ref, err)
					}
				}
				out = append(out, realImage{ref: ref, deps: d})
				i++
			}
		}
	}
	say("real: corpus of %d images (%d layers each, %d+%d+%d MB over the workloads' base; families share the first, runtimes the second) in %s (%.0f s)",
		len(out), len(out[0].deps.Layers), baseMB, runtimeMB, appMB, *registry, time.Since(t0).Seconds())
	return out, nil
}

func push(ctx context.Context, cli *client.Client, ref string) error {
	auth := base64.URLEncoding.EncodeToString([]byte("{}"))
	rc, err := cli.ImagePush(ctx, ref, client.ImagePushOptions{RegistryAuth: auth})
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	defer rc.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(rc, io.Discard, 0, false, nil); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

type procs struct {
	mu sync.Mutex
	ps []*exec.Cmd
}

func (p *procs) start(logPath string, name string, args ...string) error {
	lf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	go func() { _ = cmd.Wait(); lf.Close() }()
	p.mu.Lock()
	p.ps = append(p.ps, cmd)
	p.mu.Unlock()
	return nil
}

// stopAll ends exactly the processes started here, by pid.
func (p *procs) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.ps {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range p.ps {
		for c.ProcessState == nil && time.Now().Before(deadline) && c.Process.Signal(syscall.Signal(0)) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Process.Kill()
	}
	p.ps = nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func hostsSh(args ...string) error {
	cmd := exec.Command("scripts/hosts.sh", args...)
	cmd.Env = append(os.Environ(), "ESCRA_HOSTS_NAME="+hostsName, "ESCRA_HOSTS_TAG="+hostsTag, "ESCRA_HOSTS_METRICS_BASE=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func engineSock(n int) string { return fmt.Sprintf("unix:///run/%s/h%d/docker.sock", hostsName, n) }

// hostState snapshots an engine's images as the controller would see them.
type hostState struct {
	cli  *client.Client
	mu   sync.Mutex
	byID map[string][]string // image id -> diff-ids (immutable)
}

func (h *hostState) read(ctx context.Context) *placement.HostDeps {
	list, err := h.cli.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return placement.NewHostDeps()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var rep []imageresolve.ImageReport
	for _, s := range list.Items {
		ids, ok := h.byID[s.ID]
		if !ok {
			ins, err := h.cli.ImageInspect(ctx, s.ID)
			if err != nil {
				continue
			}
			ids = ins.RootFS.Layers
			h.byID[s.ID] = ids
		}
		rep = append(rep, imageresolve.ImageReport{ID: s.ID, Names: s.RepoTags, DiffIDs: ids})
	}
	return imageresolve.HostDeps(rep)
}

type sample struct {
	startup, pull         float64 // s
	missLayer, missPrefix float64 // bytes the host lacked before, by layer and by chain prefix
	host                  string
	err                   error
}

func realBench() error {
	if os.Geteuid() != 0 {
		return errors.New("real benchmark: must run as root (it starts engines); PARTS=sim,sched skips it")
	}
	for _, b := range []string{"escrad", "escra-controller"} {
		if _, err := os.Stat(filepath.Join(*binDir, b)); err != nil {
			return fmt.Errorf("real benchmark: %s/%s missing (make build)", *binDir, b)
		}
	}
	if resp, err := http.Get("http://" + *registry + "/v2/"); err != nil {
		return fmt.Errorf("real benchmark: registry %s does not answer (scripts/setup.sh starts it): %v", *registry, err)
	} else {
		resp.Body.Close()
	}
	ctx := context.Background()
	mainCli, err := client.New(client.WithHost("unix:///var/run/docker.sock"))
	if err != nil {
		return err
	}
	corpus, err := buildCorpus(ctx, mainCli)
	if err != nil {
		return err
	}
	if err := hostsSh("up", fmt.Sprint(*realHosts), "--no-escrad", "--insecure"); err != nil {
		return fmt.Errorf("hosts.sh up: %w", err)
	}
	defer func() {
		if err := hostsSh("down"); err != nil {
			say("real: hosts.sh down: %v", err)
		}
	}()
	var engines []*client.Client
	for n := 1; n <= *realHosts; n++ {
		c, err := client.New(client.WithHost(engineSock(n)))
		if err != nil {
			return err
		}
		engines = append(engines, c)
	}
	pullReg := *registry
	link := "none (loopback)"
	if *realLimit > 0 {
		addr, stop, err := linkProxy(*registry, *realLimit)
		if err != nil {
			return err
		}
		defer stop()
		pullReg = addr
		link = fmt.Sprintf("%.0f MB/s per connection through a proxy on %s", *realLimit/(1<<20), addr)
	}
	summary["real_link_bytes_per_s_per_conn"] = *realLimit
	logs := filepath.Join(*out, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	say("real: %d engines (scripts/hosts.sh, overlay store), escrad --image-budget %d MB each, %d submissions at %.2f/s per policy, Zipf 0.75 over %d images; registry link: %s; this machine (2 cores) is shared with other engineers' builds and tests",
		*realHosts, *realBudget>>20, *realN, *realRate, len(corpus), link)
	means := map[string]float64{}
	for _, pol := range strings.Split(*realPols, ",") {
		ss, err := realPolicy(ctx, pol, corpus, engines, logs, pullReg)
		if err != nil {
			return fmt.Errorf("policy %s: %w", pol, err)
		}
		var st, pl []float64
		var xs, ys, zs []float64
		fails := 0
		for _, s := range ss {
			if s.err != nil {
				fails++
				continue
			}
			st = append(st, s.startup)
			pl = append(pl, s.pull)
			xs, ys, zs = append(xs, s.missLayer), append(ys, s.missPrefix), append(zs, s.pull)
		}
		if len(st) == 0 {
			return fmt.Errorf("policy %s: every submission failed (first: %v)", pol, ss[0].err)
		}
		sort.Float64s(st)
		m := mean(st)
		means[pol] = m
		k := key(pol)
		summary["real_mean_startup_s_"+k] = m
		summary["real_startup_p50_s_"+k] = st[len(st)/2]
		summary["real_startup_p90_s_"+k] = st[len(st)*9/10]
		summary["real_mean_pull_s_"+k] = mean(pl)
		summary["real_failed_"+k] = fails
		summary["real_pull_corr_layer_missing_"+k] = pearson(xs, zs)
		summary["real_pull_corr_prefix_missing_"+k] = pearson(ys, zs)
		say("real %-12s n=%d (failed %d): startup mean %.2f s, p50 %.2f, p90 %.2f; pull mean %.2f s; pull vs missing bytes r = %.2f by layer, %.2f by chain prefix",
			pol, len(st), fails, m, st[len(st)/2], st[len(st)*9/10], mean(pl), pearson(xs, zs), pearson(ys, zs))
		var cdfs []series
		for _, p := range strings.Split(*realPols, ",") {
			if r, ok := realCDF[p]; ok {
				cdfs = append(cdfs, cdf(p, r))
			}
		}
		_ = linePlot(filepath.Join(*out, "fig8.svg"), "Real startup latency CDF (cf. dependency-aware scheduling Fig 8a)", "startup (s, log)", "CDF", cdfs, true)
	}
	if a, ok := means["random"]; ok {
		if v, ok := means["image-match"]; ok {
			summary["real_image_match_speedup"] = a / v
		}
		if v, ok := means["layer-match"]; ok {
			summary["real_layer_match_speedup"] = a / v
		}
		if v, ok := means["prefix-match"]; ok {
			summary["real_prefix_match_speedup"] = a / v
		}
		say("real speedup vs random (dependency-aware scheduling §7.1, low load: 1.83 / 2.34): image-match %v, layer-match %v",
			summary["real_image_match_speedup"], summary["real_layer_match_speedup"])
	}
	return nil
}

var realCDF = map[string][]float64{}

// realPolicy runs one policy from empty engines.
func realPolicy(ctx context.Context, pol string, corpus []realImage, engines []*client.Client, logs, pullReg string) ([]sample, error) {
	for _, e := range engines {
		if err := wipe(ctx, e); err != nil {
			return nil, err
		}
	}
	var ps procs
	defer ps.stopAll()
	tcp, err := freePort()
	if err != nil {
		return nil, err
	}
	udp, _ := freePort()
	adm, _ := freePort()
	err = ps.start(filepath.Join(logs, "controller-"+pol+".log"), filepath.Join(*binDir, "escra-controller"),
		"--insecure", "--listen", tcp, "--telemetry-listen", udp, "--admin-listen", adm, "--store", "none",
		"--placement", pol, "--resolve-registries", pullReg, "--reclaim-every", "0")
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "dep-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for n := 1; n <= len(engines); n++ {
		err := ps.start(filepath.Join(logs, fmt.Sprintf("escrad-h%d-%s.log", n, pol)), filepath.Join(*binDir, "escrad"),
			"--insecure", "--host-id", fmt.Sprintf("h%d", n), "--controller", tcp, "--docker-host", engineSock(n),
			"--backend", "cgroupfs", "--pull-registries", pullReg, "--image-budget", fmt.Sprint(*realBudget),
			"--lock-dir", tmp, "--oom-state", filepath.Join(tmp, fmt.Sprintf("h%d.oom", n)), "--no-oom-guard")
		if err != nil {
			return nil, err
		}
	}
	ac, err := adminclient.New("http://" + adm)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		hs, err := ac.Hosts(ctx)
		if err == nil && len(hs) == len(engines) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only some escrads connected within 60 s (logs in %s): %v", logs, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	states := make([]*hostState, len(engines))
	for i, e := range engines {
		states[i] = &hostState{cli: e, byID: map[string][]string{}}
	}
	// The same arrivals, images and task lengths for every policy.
	rng := rand.New(rand.NewSource(*seed))
	zipf := make([]float64, len(corpus))
	var sum float64
	perm := rng.Perm(len(corpus))
	for k := range zipf {
		sum += math.Pow(float64(k+1), -0.75)
		zipf[k] = sum
	}
	samples := make([]sample, *realN)
	var wg sync.WaitGroup
	t0 := time.Now()
	at := 0.0
	for i := 0; i < *realN; i++ {
		at += rng.ExpFloat64() / *realRate
		k := sort.SearchFloat64s(zipf, rng.Float64()*sum)
		img := corpus[perm[min(k, len(corpus)-1)]]
		task := time.Duration((5 + 10*rng.Float64()) * float64(time.Second))
		time.Sleep(time.Until(t0.Add(time.Duration(at * float64(time.Second)))))
		app := fmt.Sprintf("dep-%s-%d", strings.ReplaceAll(pol, "-", ""), i)
		// What each host holds as the request arrives (for the
		// layer-vs-prefix question), read before submitting.
		before := make([]*placement.HostDeps, len(states))
		for j, s := range states {
			before[j] = s.read(ctx)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := &samples[i]
			sub := time.Now()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			if err := ac.PutApp(cctx, adminapi.AppSpec{Name: app, CPUCores: 0.2, MemoryBytes: 256 << 20}); err != nil {
				s.err = err
				return
			}
			ref := strings.Replace(img.ref, *registry, pullReg, 1)
			placed, err := ac.Deploy(cctx, app, []adminapi.DeployContainer{{Name: app, Image: ref,
				Command: []string{"/bin/spin", "-idle"}, Network: "none", CPUCores: 0.05, MemoryBytes: 32 << 20}})
			if err != nil {
				s.err = err
				_ = ac.DeleteApp(context.WithoutCancel(ctx), app)
				return
			}
			s.startup = time.Since(sub).Seconds()
			s.pull = placed[0].PullMs / 1e3
			s.host = placed[0].HostID
			var hi int
			fmt.Sscanf(s.host, "h%d", &hi)
			if hi >= 1 && hi <= len(before) {
				s.missLayer = float64(img.deps.Size - placement.LayerBytes(img.deps, before[hi-1]))
				s.missPrefix = float64(img.deps.Size - placement.PrefixBytes(img.deps, before[hi-1]))
			}
			time.Sleep(task)
			_ = ac.DeleteApp(context.WithoutCancel(ctx), app)
		}(i)
	}
	wg.Wait()
	var st []float64
	for _, s := range samples {
		if s.err == nil {
			st = append(st, s.startup)
		} else {
			say("real %s: a submission failed: %v", pol, s.err)
		}
	}
	sort.Float64s(st)
	realCDF[pol] = st
	return samples, nil
}

// wipe empties one of the benchmark's own engines (containers, images).
func wipe(ctx context.Context, e *client.Client) error {
	cs, err := e.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return err
	}
	for _, c := range cs.Items {
		_, _ = e.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}
	ims, err := e.ImageList(ctx, client.ImageListOptions{All: true})
	if err != nil {
		return err
	}
	for _, im := range ims.Items {
		_, _ = e.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
	return nil
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func pearson(x, y []float64) float64 {
	if len(x) < 3 {
		return 0
	}
	mx, my := mean(x), mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

// linkProxy forwards TCP to target and lets at most rate bytes per second
// per connection flow back from it: a registry on loopback then costs a
// pull what a network link of that rate would (the request direction is
// not limited). It returns its address and a stop function.
func linkProxy(target string, rate float64) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			go func() {
				defer wg.Done()
				defer c.(*net.TCPConn).CloseWrite()
				buf := make([]byte, 32<<10)
				start, sent := time.Now(), 0.0
				for {
					n, err := up.Read(buf)
					if n > 0 {
						sent += float64(n)
						if ahead := time.Duration(sent/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
							time.Sleep(ahead)
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	stop := func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	return ln.Addr().String(), stop, nil
}
