package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/bench/images"
	"github.com/escra-dev/escra/bench/load"
	"github.com/escra-dev/escra/daemon/agent"
	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/peer"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

const benchApp = "wys-bench"

// env is the real engine, the images, and an escrad agent (its real
// allocator) talking to a scripted controller.
type env struct {
	cli     *client.Client
	nginx   string
	sysb    string
	gowork  string
	busy    string
	views   string
	peer    *peer.Peer
	agent   *agent.Agent
	stop    func()
	created []string
	lxcfs   *exec.Cmd // nil: no LXCFS on this host
	lxcMnt  string
}

func newEnv(ctx context.Context, log *slog.Logger) (*env, error) {
	cli, err := containers.NewDockerClient(*docker)
	if err != nil {
		return nil, err
	}
	if _, err := cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("docker engine: %w (make setup starts it)", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpuset"); err != nil {
		return nil, errors.New("needs the cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset")
	}
	e := &env{cli: cli}
	repo, err := images.RepoRoot(".")
	if err != nil {
		return nil, err
	}
	b := &images.Builder{Docker: cli, RepoRoot: repo, Log: func(s string) { say("%s", s) }}
	if e.nginx, err = b.Build(ctx, nginxAuto); err != nil {
		return nil, err
	}
	if e.sysb, err = b.Build(ctx, sysbenchImg); err != nil {
		return nil, err
	}
	if e.gowork, err = b.Build(ctx, goworkImg); err != nil {
		return nil, err
	}
	if e.busy, err = dockertest.ImportBusybox(ctx, cli); err != nil {
		return nil, err
	}
	if e.views, err = os.MkdirTemp("", "wys-views-"); err != nil {
		return nil, err
	}
	if e.peer, err = peer.Start(); err != nil {
		return nil, err
	}
	e.agent, err = agent.New(agent.Config{HostID: "wys-bench", Controller: e.peer.Addr(), Period: 100 * time.Millisecond,
		OOMDeadline: 200 * time.Millisecond, Heartbeat: time.Second, Backend: agent.BackendCgroupfs, Docker: cli,
		Log: log, Apps: []string{benchApp}, CPUPlacement: agent.CPUPlacementHard, ViewDir: e.views})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.agent.Run(actx) }()
	e.stop = func() { cancel(); wg.Wait() }
	<-e.agent.Started()
	e.startLXCFS()
	return e, nil
}

// startLXCFS mounts a private LXCFS (Debian lxcfs) for this run: its
// /proc/cpuinfo and /proc/stat follow the reading container's cpuset
// live. Its /sys/devices/system/cpu/online is not used: with several
// containers reading it the kernel's cached file size truncates the
// longer lists (docs/wysiwyg.md); escrad's own view file replaces it.
func (e *env) startLXCFS() {
	bin, err := exec.LookPath("lxcfs")
	if err != nil {
		say("no lxcfs: /proc/cpuinfo and /proc/stat stay the host's (scripts/setup.sh installs it)")
		return
	}
	dir, err := os.MkdirTemp("", "wys-lxcfs-")
	if err != nil {
		return
	}
	mnt := filepath.Join(dir, "mnt")
	_ = os.Mkdir(mnt, 0o755)
	cmd := exec.Command(bin, "-f", "--enable-cfs", "-p", filepath.Join(dir, "pid"), mnt)
	if err := cmd.Start(); err != nil {
		say("lxcfs did not start: %v", err)
		return
	}
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(filepath.Join(mnt, "proc", "cpuinfo")); err == nil {
			e.lxcfs, e.lxcMnt = cmd, mnt
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	say("lxcfs did not mount within 5 s")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (e *env) close() {
	for _, id := range e.created {
		dockertest.Remove(e.cli, id)
	}
	if e.stop != nil {
		e.stop()
	}
	if e.peer != nil {
		e.peer.Close()
	}
	if e.views != "" {
		os.RemoveAll(e.views)
	}
	if e.lxcfs != nil {
		_ = e.lxcfs.Process.Signal(unix.SIGTERM)
		_ = e.lxcfs.Wait()
		_ = unix.Unmount(e.lxcMnt, unix.MNT_DETACH)
		os.RemoveAll(filepath.Dir(e.lxcMnt))
	}
	e.cli.Close()
}

var busyboxLinks = []string{"sh", "nproc", "sed", "cat", "sleep", "grep", "wc"}

func fillBusybox(r *images.Rootfs) error {
	if err := r.HostFile("/bin/busybox", "/bin/busybox"); err != nil {
		return fmt.Errorf("busybox (Debian busybox-static): %w", err)
	}
	for _, l := range busyboxLinks {
		r.Symlink("/bin/"+l, "busybox")
	}
	r.Dir("/tmp", 0o1777)
	r.File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n"))
	r.File("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	return nil
}

// nginxAuto is Debian's nginx with worker_processes auto: nginx counts
// sysconf(_SC_NPROCESSORS_ONLN), which glibc reads from
// /sys/devices/system/cpu/online.
var nginxAuto = images.Spec{
	Name: "wys-nginx",
	Fill: func(_ string, r *images.Rootfs) error {
		if err := r.HostBinary("/usr/sbin/nginx"); err != nil {
			return fmt.Errorf("nginx (Debian nginx-light): %w", err)
		}
		if err := fillBusybox(r); err != nil {
			return err
		}
		r.Dir("/var/log/nginx", 0o755)
		r.Dir("/var/lib/nginx", 0o755)
		for p, n := range images.NginxFiles {
			r.File(p, 0o644, images.CompressibleText(n, int64(n)))
		}
		r.File("/etc/wys-nginx.conf.in", 0o644, []byte(nginxConf))
		return nil
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c", "sed s/@PORT@/$PORT/ /etc/wys-nginx.conf.in > /tmp/nginx.conf && exec /usr/sbin/nginx -e stderr -c /tmp/nginx.conf"]`},
}

// reuseport gives each worker its own listening socket and spreads
// connections over them: without it one worker often accepts all of
// wrk's connections at once, and the quota arm is a single-threaded
// program like the WYSIWYG arm (docs/wysiwyg.md, runs 6 and 7).
const nginxConf = `worker_processes auto;
daemon off;
master_process on;
user root;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    default_type text/plain;
    types { text/plain txt; }
    client_body_temp_path /tmp/nginx-body;
    proxy_temp_path /tmp/nginx-proxy;
    fastcgi_temp_path /tmp/nginx-fastcgi;
    uwsgi_temp_path /tmp/nginx-uwsgi;
    scgi_temp_path /tmp/nginx-scgi;
    keepalive_requests 100000;
    gzip on;
    gzip_comp_level 9;
    gzip_min_length 1;
    gzip_types text/plain;
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        root /srv/www;
    }
}
`

// goworkImg is a Go program with the runtime's defaults (gowork/).
var goworkImg = images.Spec{
	Name: "wys-gowork",
	Fill: func(repo string, r *images.Rootfs) error {
		b, err := images.GoBinary(repo, "bench/cmd/bench-wysiwyg/gowork")
		if err != nil {
			return err
		}
		r.File("/gowork", 0o755, b)
		return fillBusybox(r)
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c"]`},
}

var sysbenchImg = images.Spec{
	Name: "wys-sysbench",
	Fill: func(_ string, r *images.Rootfs) error {
		if err := r.HostBinary("/usr/bin/sysbench"); err != nil {
			return fmt.Errorf("sysbench (Debian sysbench): %w", err)
		}
		return fillBusybox(r)
	},
	Changes: []string{`ENTRYPOINT ["/bin/sh", "-c"]`},
}

// start runs a container; wysiwyg labels it for escrad (C1) and mounts
// its online view.
func (e *env) start(ctx context.Context, name, img string, wysiwygC1 bool, quota int64, env []string, cmd []string) (string, error) {
	return e.startManaged(ctx, name, img, wysiwygC1, false, quota, env, cmd)
}

// startManaged is start; managed also puts a shared container under
// escrad (escra.app without escra.cpu).
func (e *env) startManaged(ctx context.Context, name, img string, wysiwygC1, managed bool, quota int64, env []string, cmd []string) (string, error) {
	cfg := &container.Config{Image: img, Env: env, Cmd: cmd, Labels: map[string]string{}}
	if managed {
		cfg.Labels[containers.AppLabel] = benchApp
	}
	hc := &container.HostConfig{NetworkMode: "host"}
	hc.Resources.CPUQuota, hc.Resources.CPUPeriod = quota, 100000
	if wysiwygC1 {
		cfg.Labels[containers.AppLabel] = benchApp
		cfg.Labels[containers.CPULabel] = containers.CPUWysiwyg
		view, err := agent.PrepareView(e.views, name, int((quota+99999)/100000))
		if err != nil {
			return "", err
		}
		hc.Binds = []string{view + ":/sys/devices/system/cpu/online:ro"}
		if e.lxcMnt != "" {
			for _, f := range []string{"/proc/cpuinfo", "/proc/stat"} {
				hc.Binds = append(hc.Binds, e.lxcMnt+f+":"+f+":ro")
			}
		}
	}
	cr, err := e.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		return "", err
	}
	e.created = append(e.created, cr.ID)
	if err := e.cli.ContainerStart(ctx, cr.ID, container.StartOptions{}); err != nil {
		return cr.ID, err
	}
	return cr.ID, nil
}

func (e *env) exec(ctx context.Context, id string, cmd ...string) (string, error) {
	ex, err := e.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", err
	}
	at, err := e.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer at.Close()
	var o, er bytes.Buffer
	_, err = stdcopy.StdCopy(&o, &er, at.Reader)
	return strings.TrimSpace(o.String()), err
}

func (e *env) group(ctx context.Context, id string) (*cgroups.Group, error) {
	j, err := e.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.State == nil || j.State.Pid <= 0 {
		return nil, fmt.Errorf("container %s is not running", id[:12])
	}
	p, err := cgroups.PathsForPID(j.State.Pid)
	if err != nil {
		return nil, err
	}
	return cgroups.Open(p)
}

func readCPUs(g *cgroups.Group) (wysiwyg.CPUSet, error) {
	var buf [256]byte
	b, err := g.Read(cgroups.CPUSetCPUs, buf[:])
	if err != nil {
		return nil, err
	}
	return wysiwyg.ParseCPUSet(string(b))
}

// waitPlaced waits until escrad has given the container n cores.
func (e *env) waitPlaced(ctx context.Context, id string, n int) error {
	g, err := e.group(ctx, id)
	if err != nil {
		return err
	}
	defer g.Close()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		if s, err := readCPUs(g); err == nil && len(s) == n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, _ := readCPUs(g)
	return fmt.Errorf("escrad did not place container %s on %d cores within 10 s (cpuset %s)", id[:12], n, s)
}

// workers counts a container's processes minus one (nginx's master).
func (e *env) workers(ctx context.Context, id string) (int, error) {
	g, err := e.group(ctx, id)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	b, err := os.ReadFile(filepath.Join(g.Paths.CPU, "cgroup.procs"))
	if err != nil {
		return 0, err
	}
	return len(strings.Fields(string(b))) - 1, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitHTTP(ctx context.Context, url string) error {
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		r, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer within 15 s", url)
}

// pinClients puts this process (and so wrk, its child) on CPU 0: under
// WYSIWYG escrad gives the C1 container the highest-numbered core, so
// the client does not run on it in either case. Affinity is per thread
// and Go forks wrk from whichever thread runs the goroutine, so every
// thread is pinned (pinning only the calling one left wrk on 0-1 in most
// runs, next to the WYSIWYG nginx on core 1). Threads made later inherit
// the affinity of a pinned one; a second pass catches any made meanwhile.
func pinClients() error {
	var set unix.CPUSet
	set.Set(0)
	for pass := 0; pass < 3; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		changed := false
		for _, ent := range ents {
			tid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &cur); err == nil && cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return nil
}

type caseResult struct {
	nproc, online, workers, threads int
	cpuinfo                         int
	cores, throttled                float64 // nginx: cores used, % of periods throttled
	use                             usage   // nginx: the whole measurement
	busyWorkers                     int     // nginx processes that used >= 10 % of a core
	goProcs                         int
	goOps, goP99                    float64
	onlineText                      string
	rps, p99ms, eps, sp99ms         float64
}

// realPrograms is phase 1: reps repetitions of both cases, alternating
// which goes first; the summary holds the medians.
func (e *env) realPrograms(ctx context.Context, sum summary, rep *strings.Builder) error {
	if err := pinClients(); err != nil {
		return fmt.Errorf("pin the load generator on CPU 0: %w", err)
	}
	fmt.Fprintf(rep, "## Real programs at a 1-core allocation\n\nquota = stock Docker `--cpus 1`; wysiwyg = escra.cpu=wysiwyg with `--cpus 1`, placed by escrad (hard mode) on an exclusive core, its /sys/devices/system/cpu/online view bind-mounted. nginx listens with reuseport; wrk (1 thread, 8 connections, gzip) pinned on CPU 0 (every thread of this process), %v per run; %d repetitions, alternating which case goes first; the summary holds medians.\n\n", *dur, *reps)
	fmt.Fprintf(rep, "| case | rep | nproc | online | /proc/cpuinfo CPUs | nginx workers | nginx req/s | nginx p99 ms | nginx cores used | nginx throttled %% | sysbench threads | sysbench events/s | sysbench p99 ms | Go GOMAXPROCS | Go blocks/s | Go p99 ms | nginx busy workers | idle on app CPUs | others on app CPUs |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	all := map[string][]caseResult{}
	for r := 0; r < *reps; r++ {
		order := []string{"quota", "wysiwyg"}
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, mode := range order {
			c, err := e.oneCase(ctx, mode, r)
			if err != nil {
				return err
			}
			all[mode] = append(all[mode], c)
			fmt.Fprintf(rep, "| %s | %d | %d | %s | %d | %d | %.0f | %.1f | %.2f | %.0f | %d | %.0f | %.2f | %d | %.0f | %.2f | %d | %.2f | %.2f |\n", mode, r+1, c.nproc, c.onlineText, c.cpuinfo, c.workers, c.rps, c.p99ms, c.cores, c.throttled, c.threads, c.eps, c.sp99ms, c.goProcs, c.goOps, c.goP99, c.busyWorkers, c.use.appIdle, c.use.appOthers)
		}
	}
	for mode, cs := range all {
		med := func(f func(caseResult) float64) float64 {
			v := make([]float64, len(cs))
			for i, c := range cs {
				v[i] = f(c)
			}
			sort.Float64s(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		sum["nproc_"+mode] = med(func(c caseResult) float64 { return float64(c.nproc) })
		sum["cpuinfo_processors_"+mode] = med(func(c caseResult) float64 { return float64(c.cpuinfo) })
		sum["online_cpus_"+mode] = med(func(c caseResult) float64 { return float64(c.online) })
		sum["nginx_workers_"+mode] = med(func(c caseResult) float64 { return float64(c.workers) })
		sum["nginx_throughput_"+mode] = round2(med(func(c caseResult) float64 { return c.rps }))
		sum["nginx_p99_ms_"+mode] = round2(med(func(c caseResult) float64 { return c.p99ms }))
		sum["nginx_cores_used_"+mode] = round2(med(func(c caseResult) float64 { return c.cores }))
		sum["nginx_throttled_pct_"+mode] = round2(med(func(c caseResult) float64 { return c.throttled }))
		sum["nginx_req_per_core_s_"+mode] = round2(med(func(c caseResult) float64 {
			if c.cores <= 0 {
				return 0
			}
			return c.rps / c.cores
		}))
		sum["nginx_busy_workers_"+mode] = med(func(c caseResult) float64 { return float64(c.busyWorkers) })
		sum["nginx_app_cpus_idle_cores_"+mode] = round2(med(func(c caseResult) float64 { return c.use.appIdle }))
		sum["nginx_app_cpus_others_cores_"+mode] = round2(med(func(c caseResult) float64 { return c.use.appOthers }))
		sum["nginx_client_cores_"+mode] = round2(med(func(c caseResult) float64 { return c.use.client }))
		sum["go_gomaxprocs_"+mode] = med(func(c caseResult) float64 { return float64(c.goProcs) })
		sum["go_throughput_"+mode] = round2(med(func(c caseResult) float64 { return c.goOps }))
		sum["go_p99_ms_"+mode] = round2(med(func(c caseResult) float64 { return c.goP99 }))
		sum["sysbench_threads_"+mode] = med(func(c caseResult) float64 { return float64(c.threads) })
		sum["sysbench_throughput_"+mode] = round2(med(func(c caseResult) float64 { return c.eps }))
		sum["sysbench_p99_ms_"+mode] = round2(med(func(c caseResult) float64 { return c.sp99ms }))
	}
	sum["real_reps"] = *reps
	// The floor compares the same allocation where it binds; it is a fair
	// test only if each arm got about its 1 core and no one else ran on
	// the WYSIWYG core (on a shared host other people's pinned processes
	// do: a cpuset confines the container, not them).
	g := func(k string) float64 { v, _ := sum[k].(float64); return v }
	fair := g("nginx_cores_used_quota") >= 0.9 && g("nginx_cores_used_wysiwyg") >= 0.9 && g("nginx_app_cpus_others_cores_wysiwyg") < 0.1
	sum["nginx_floor_fair"] = fair
	sum["nginx_floor_met"] = g("nginx_throughput_wysiwyg") >= g("nginx_throughput_quota")
	fmt.Fprintf(rep, "\nnginx floor (WYSIWYG >= quota): %v; a fair test (each arm used >= 0.9 of its core, < 0.1 core of others' work on the WYSIWYG core): %v. Per core-second: %.0f req (quota) vs %.0f (wysiwyg); others' work on the app's CPUs: %.2f vs %.2f cores.\n\n",
		sum["nginx_floor_met"], fair, g("nginx_req_per_core_s_quota"), g("nginx_req_per_core_s_wysiwyg"), g("nginx_app_cpus_others_cores_quota"), g("nginx_app_cpus_others_cores_wysiwyg"))
	return nil
}

func (e *env) oneCase(ctx context.Context, mode string, r int) (caseResult, error) {
	var c caseResult
	c1 := mode == "wysiwyg"
	port, err := freePort()
	if err != nil {
		return c, err
	}
	name := fmt.Sprintf("%s-nginx-%s-%d-%d", *namePrefix, mode, os.Getpid(), r)
	id, err := e.start(ctx, name, e.nginx, c1, 100000, []string{"PORT=" + strconv.Itoa(port)}, nil)
	if err != nil {
		return c, fmt.Errorf("nginx %s: %w", mode, err)
	}
	defer dockertest.Remove(e.cli, id)
	if c1 {
		if err := e.waitPlaced(ctx, id, 1); err != nil {
			return c, err
		}
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/64k.txt", port)
	if err := waitHTTP(ctx, url); err != nil {
		return c, fmt.Errorf("nginx %s: %w", mode, err)
	}
	nproc, err := e.exec(ctx, id, "nproc")
	if err != nil {
		return c, err
	}
	c.nproc, _ = strconv.Atoi(nproc)
	if c.onlineText, err = e.exec(ctx, id, "cat", "/sys/devices/system/cpu/online"); err != nil {
		return c, err
	}
	if ci, err := e.exec(ctx, id, "grep", "-c", "^processor", "/proc/cpuinfo"); err == nil {
		c.cpuinfo, _ = strconv.Atoi(ci)
	}
	onl, _ := wysiwyg.ParseCPUSet(c.onlineText)
	c.online = len(onl)
	if c.workers, err = e.workers(ctx, id); err != nil {
		return c, err
	}
	say("nginx %s (rep %d): nproc %d, online %q, %d workers; wrk for %v", mode, r+1, c.nproc, c.onlineText, c.workers, *dur)
	var res load.Result
	pt0 := e.procTimes(ctx, id)
	u, err := e.cpuUse(ctx, id, func() (err error) {
		res, err = load.RunWrk(ctx, load.WrkRun{URL: url, Threads: 1, Conns: 8, Duration: *dur, Header: []string{"Accept-Encoding: gzip"}, Timeout: 5 * time.Second})
		return err
	})
	if err != nil {
		return c, fmt.Errorf("wrk against nginx %s: %w", mode, err)
	}
	c.use = u
	c.cores, c.throttled = u.cores, u.throttledPct
	c.busyWorkers = busyProcs(pt0, e.procTimes(ctx, id), *dur)
	say("nginx %s (rep %d): %.0f req/s, %.2f cores used on CPUs %s (idle there %.2f, others there %.2f), %d busy worker(s), wrk %.2f cores",
		mode, r+1, res.ThroughputRPS, u.cores, u.appCPUs, u.appIdle, u.appOthers, c.busyWorkers, u.client)
	c.rps, c.p99ms = res.ThroughputRPS, res.P99Us/1000
	dockertest.Remove(e.cli, id)

	// sysbench: the container waits 2 s (escrad places a C1 container
	// within a second of its start), then sizes its threads with nproc
	// like the command line.
	name = fmt.Sprintf("%s-sysbench-%s-%d-%d", *namePrefix, mode, os.Getpid(), r)
	cmd := fmt.Sprintf("sleep 2; echo threads=$(nproc); exec sysbench cpu --threads=$(nproc) --time=%d --percentile=99 run", max(1, int(dur.Seconds())))
	sid, err := e.start(ctx, name, e.sysb, c1, 100000, nil, []string{cmd})
	if err != nil {
		return c, fmt.Errorf("sysbench %s: %w", mode, err)
	}
	defer dockertest.Remove(e.cli, sid)
	say("sysbench %s (rep %d) for %v", mode, r+1, *dur)
	logs, err := e.waitLogs(ctx, sid, *dur+30*time.Second)
	if err != nil {
		return c, fmt.Errorf("sysbench %s: %w", mode, err)
	}
	if c.threads, c.eps, c.sp99ms, err = parseSysbench(logs); err != nil {
		return c, fmt.Errorf("sysbench %s: %w", mode, err)
	}

	// A Go program with the runtime's default GOMAXPROCS.
	name = fmt.Sprintf("%s-gowork-%s-%d-%d", *namePrefix, mode, os.Getpid(), r)
	gid, err := e.start(ctx, name, e.gowork, c1, 100000, nil, []string{fmt.Sprintf("sleep 2; exec /gowork -for %v", *dur)})
	if err != nil {
		return c, fmt.Errorf("gowork %s: %w", mode, err)
	}
	defer dockertest.Remove(e.cli, gid)
	say("gowork %s (rep %d) for %v", mode, r+1, *dur)
	if logs, err = e.waitLogs(ctx, gid, *dur+30*time.Second); err != nil {
		return c, fmt.Errorf("gowork %s: %w", mode, err)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(logs), "gomaxprocs=%d ops_per_s=%f p99_ms=%f", &c.goProcs, &c.goOps, &c.goP99); err != nil {
		return c, fmt.Errorf("gowork %s: unexpected output %q", mode, tail(logs, 200))
	}
	return c, nil
}

func (e *env) waitLogs(ctx context.Context, id string, d time.Duration) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, _, err := dockertest.Wait(wctx, e.cli, id); err != nil {
		return "", err
	}
	rc, err := e.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var o, er bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &er, rc); err != nil {
		return "", err
	}
	return o.String() + er.String(), nil
}

var (
	reThreads = regexp.MustCompile(`threads=(\d+)`)
	reEPS     = regexp.MustCompile(`events per second:\s+([0-9.]+)`)
	reP99     = regexp.MustCompile(`99th percentile:\s+([0-9.]+)`)
)

func parseSysbench(s string) (threads int, eps, p99 float64, err error) {
	m1, m2, m3 := reThreads.FindStringSubmatch(s), reEPS.FindStringSubmatch(s), reP99.FindStringSubmatch(s)
	if m1 == nil || m2 == nil || m3 == nil {
		return 0, 0, 0, fmt.Errorf("unexpected sysbench output: %q", tail(s, 400))
	}
	threads, _ = strconv.Atoi(m1[1])
	eps, _ = strconv.ParseFloat(m2[1], 64)
	p99, _ = strconv.ParseFloat(m3[1], 64)
	return threads, eps, p99, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// escraRun is phase 2: a C1 container (two busy threads) and a C2
// container under escrad; the scripted controller moves the C1 quota
// every period along 1 ± 0.7 cores (a 4 s sine), across the 1-core
// boundary; the cgroup files are sampled every 100 ms.
func (e *env) escraRun(ctx context.Context, sum summary, rep *strings.Builder) error {
	spin := "while :; do :; done & while :; do :; done"
	c2 := fmt.Sprintf("%s-c2-%d", *namePrefix, os.Getpid())
	c1 := fmt.Sprintf("%s-c1-%d", *namePrefix, os.Getpid())
	// The C2 container joins the same app so escrad places it too.
	cfg := &container.Config{Image: e.busy, Cmd: []string{"while :; do :; done"}, Labels: map[string]string{containers.AppLabel: benchApp}}
	hc := &container.HostConfig{NetworkMode: "none"}
	hc.Resources.CPUQuota, hc.Resources.CPUPeriod = 50000, 100000
	cr, err := e.cli.ContainerCreate(ctx, cfg, hc, nil, nil, c2)
	if err != nil {
		return err
	}
	e.created = append(e.created, cr.ID)
	if err := e.cli.ContainerStart(ctx, cr.ID, container.StartOptions{}); err != nil {
		return err
	}
	sharedID := cr.ID
	id, err := e.start(ctx, c1, e.busy, true, 50000, nil, []string{spin})
	if err != nil {
		return err
	}
	reg := e.peer.WaitRegistered(id, 10*time.Second)
	if reg == nil || e.peer.WaitRegistered(sharedID, 10*time.Second) == nil {
		return errors.New("escrad did not register the Escra-run containers")
	}
	if err := e.waitPlaced(ctx, id, 1); err != nil {
		return err
	}
	_ = e.agent.CPUSetChanges()
	g1, err := e.group(ctx, id)
	if err != nil {
		return err
	}
	defer g1.Close()
	g2, err := e.group(ctx, sharedID)
	if err != nil {
		return err
	}
	defer g2.Close()

	say("Escra run: quota of the C1 container moved every 100 ms across whole cores for %v", *escraDur)
	var samples, violations, updates int
	var first []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // sampler
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			v := wysiwyg.NewView()
			for name, g := range map[string]*cgroups.Group{"c1": g1, "c2": g2} {
				s, err := readCPUs(g)
				q, p, err2 := g.CPULimit()
				if err != nil || err2 != nil {
					continue
				}
				v.CPUs[name] = s
				v.Milli[name] = (q*wysiwyg.Milli + int64(p) - 1) / int64(p)
			}
			v.Class["c1"] = wysiwyg.C1
			bad := append(v.Check(nil, nil), v.CheckExclusive()...)
			samples++
			if len(bad) > 0 {
				violations++
				if first == nil {
					first = bad
				}
			}
		}
	}()
	t0 := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	var ackErrs int
	for time.Since(t0) < *escraDur {
		<-tick.C
		x := time.Since(t0).Seconds()
		cores := 1 + 0.7*math.Sin(2*math.Pi*x/4)
		q := int64(cores * 100000)
		ack, err := e.peer.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Limits: &pb.Limits{CpuQuotaUs: q}})
		updates++
		if err != nil || len(ack.Applied) != 1 || ack.Applied[0].Error != "" {
			ackErrs++
		}
	}
	tick.Stop()
	close(done)
	wg.Wait()
	ch := e.agent.CPUSetChanges()
	sort.Slice(ch, func(i, j int) bool { return ch[i] < ch[j] })
	sum["escra_wysiwyg_invariant_violations"] = violations
	sum["escra_wysiwyg_samples"] = samples
	sum["escra_quota_updates"] = updates
	sum["escra_quota_update_errors"] = ackErrs
	sum["escra_cpuset_writes"] = len(ch)
	if len(ch) > 0 {
		sum["cpuset_change_us_p50"] = round2(float64(load.Quantile(ch, 0.5)) / 1e3)
		sum["cpuset_change_us_p99"] = round2(float64(load.Quantile(ch, 0.99)) / 1e3)
	}
	fmt.Fprintf(rep, "## Escra run with quotas crossing whole cores\n\n%d quota updates (1 ± 0.7 cores, 4 s sine) in %v, %d cpuset.cpus writes (hysteresis: hold %v, band %d m); %d of %d samples of the cgroup files broke an invariant",
		updates, *escraDur, len(ch), wysiwyg.DefaultHold, wysiwyg.DefaultBand, violations, samples)
	if first != nil {
		fmt.Fprintf(rep, " (first: %v)", first)
	}
	fmt.Fprintf(rep, ". cpuset.cpus write p50 %v µs, p99 %v µs.\n\n", sum["cpuset_change_us_p50"], sum["cpuset_change_us_p99"])
	dockertest.Remove(e.cli, id)
	dockertest.Remove(e.cli, sharedID)
	return nil
}

// escraNginx is nginx under Escra: escrad manages it (C1 with
// escra.cpu=wysiwyg, or C2), and a scripted controller moves its quota
// every 100 ms along 1 ± 0.5 cores (a 4 s sine) while wrk runs. nginx
// sizes its workers once, at start (1 core: 1 worker under WYSIWYG).
func (e *env) escraNginx(ctx context.Context, sum summary, rep *strings.Builder) error {
	fmt.Fprintf(rep, "## nginx under Escra (quota moved every 100 ms along 1 ± 0.5 cores)\n\n| case | nginx workers | req/s | p99 ms | cores used | throttled %% | quota updates | errors |\n|---|---|---|---|---|---|---|---|\n")
	for _, mode := range []string{"quota", "wysiwyg"} {
		c1 := mode == "wysiwyg"
		port, err := freePort()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s-escra-nginx-%s-%d", *namePrefix, mode, os.Getpid())
		id, err := e.startManaged(ctx, name, e.nginx, c1, true, 100000, []string{"PORT=" + strconv.Itoa(port)}, nil)
		if err != nil {
			return fmt.Errorf("nginx under Escra (%s): %w", mode, err)
		}
		reg := e.peer.WaitRegistered(id, 10*time.Second)
		if reg == nil {
			dockertest.Remove(e.cli, id)
			return fmt.Errorf("escrad did not register nginx (%s)", mode)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/64k.txt", port)
		if err := waitHTTP(ctx, url); err != nil {
			dockertest.Remove(e.cli, id)
			return err
		}
		w, _ := e.workers(ctx, id)
		done := make(chan struct{})
		var updates, errs int
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				q := int64((1 + 0.5*math.Sin(2*math.Pi*time.Since(t0).Seconds()/4)) * 100000)
				ack, err := e.peer.SetLimits(ctx, &pb.LimitUpdate{Handle: reg.Handle, Limits: &pb.Limits{CpuQuotaUs: q}})
				updates++
				if err != nil || len(ack.Applied) != 1 || ack.Applied[0].Error != "" {
					errs++
				}
			}
		}()
		say("nginx under Escra (%s): %d workers; wrk for %v", mode, w, *dur)
		var res load.Result
		u, err := e.cpuUse(ctx, id, func() (err error) {
			res, err = load.RunWrk(ctx, load.WrkRun{URL: url, Threads: 1, Conns: 8, Duration: *dur, Header: []string{"Accept-Encoding: gzip"}, Timeout: 5 * time.Second})
			return err
		})
		close(done)
		wg.Wait()
		dockertest.Remove(e.cli, id)
		if err != nil {
			return fmt.Errorf("wrk against nginx under Escra (%s): %w", mode, err)
		}
		cores, thr := u.cores, u.throttledPct
		sum["nginx_throughput_escra_"+mode] = round2(res.ThroughputRPS)
		sum["nginx_p99_ms_escra_"+mode] = round2(res.P99Us / 1000)
		sum["nginx_workers_escra_"+mode] = w
		sum["nginx_cores_used_escra_"+mode] = round2(cores)
		sum["nginx_throttled_pct_escra_"+mode] = round2(thr)
		fmt.Fprintf(rep, "| %s | %d | %.0f | %.1f | %.2f | %.0f | %d | %d |\n", mode, w, res.ThroughputRPS, res.P99Us/1000, cores, thr, updates, errs)
	}
	fmt.Fprintln(rep)
	return nil
}

// usage is what a container got while a load ran, and what else its CPUs
// did: the floor comparison is fair only if the allocation binds (cores
// near 1, appIdle near 0) and the app's CPUs were not taken by others.
type usage struct {
	cores, throttledPct float64
	appCPUs             wysiwyg.CPUSet // the container's cpuset during the run
	appIdle             float64        // idle time on appCPUs, in cores
	appOthers           float64        // busy time on appCPUs not the container's nor wrk's, in cores
	client              float64        // wrk's own CPU (this process's waited children), in cores
}

// cpuUse measures a container's CPU while f runs: cores used (cpuacct),
// the share of CFS periods it was throttled in, and the idle and foreign
// time on the CPUs of its cpuset (/proc/stat). A quota that never
// throttles did not bind: the container was held back by something else
// (its client, or the host's other load on its cores).
func (e *env) cpuUse(ctx context.Context, id string, f func() error) (usage, error) {
	var r usage
	g, err := e.group(ctx, id)
	if err != nil {
		return r, err
	}
	defer g.Close()
	if r.appCPUs, err = readCPUs(g); err != nil {
		return r, err
	}
	snap := func() (p, t uint64, u int64) {
		var buf [512]byte
		if b, err := g.Read(cgroups.CPUStatFile, buf[:]); err == nil {
			p, _ = cgroups.KeyedValue(b, "nr_periods")
			t, _ = cgroups.KeyedValue(b, "nr_throttled")
		}
		u, _ = g.ReadInt(cgroups.CPUAcctUsage)
		return
	}
	children := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	p0, t0, u0 := snap()
	s0, c0 := procStat(), children()
	start := time.Now()
	if err := f(); err != nil {
		return r, err
	}
	p1, t1, u1 := snap()
	s1, c1 := procStat(), children()
	wall := float64(time.Since(start).Nanoseconds())
	r.cores = float64(u1-u0) / wall
	r.client = float64(c1-c0) / wall
	if p1 > p0 {
		r.throttledPct = 100 * float64(t1-t0) / float64(p1-p0)
	}
	var busy, idle float64
	for _, c := range r.appCPUs {
		a, b := s0[c], s1[c]
		busy += float64(b.busy - a.busy)
		idle += float64(b.idle - a.idle)
	}
	if tot := busy + idle; tot > 0 {
		n := float64(len(r.appCPUs))
		r.appIdle = n * idle / tot
		r.appOthers = n*busy/tot - r.cores
		if r.appCPUs.Has(0) { // wrk is pinned on CPU 0
			r.appOthers -= r.client
		}
		r.appOthers = max(r.appOthers, 0)
	}
	return r, nil
}

// procTimes reads the CPU time (utime+stime, in ticks) of each process
// of a container.
func (e *env) procTimes(ctx context.Context, id string) map[int]uint64 {
	g, err := e.group(ctx, id)
	if err != nil {
		return nil
	}
	defer g.Close()
	b, err := os.ReadFile(filepath.Join(g.Paths.CPU, "cgroup.procs"))
	if err != nil {
		return nil
	}
	m := map[int]uint64{}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
		rest := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(rest) < 13 {
			continue
		}
		ut, _ := strconv.ParseUint(rest[11], 10, 64)
		stt, _ := strconv.ParseUint(rest[12], 10, 64)
		m[pid] = ut + stt
	}
	return m
}

// busyProcs counts the processes that used at least 10 % of a core over d
// (USER_HZ = 100 ticks per second).
func busyProcs(a, b map[int]uint64, d time.Duration) int {
	n := 0
	for pid, t1 := range b {
		if float64(t1-a[pid]) >= 0.1*100*d.Seconds() {
			n++
		}
	}
	return n
}

type cpuTicks struct{ busy, idle uint64 }

// procStat reads each CPU's busy and idle ticks (idle + iowait) from
// /proc/stat; nil when unreadable.
func procStat() map[int]cpuTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil
	}
	m := map[int]cpuTicks{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		c, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var t cpuTicks
		for i := 1; i <= 8; i++ { // user nice system idle iowait irq softirq steal
			v, _ := strconv.ParseUint(f[i], 10, 64)
			if i == 4 || i == 5 {
				t.idle += v
			} else {
				t.busy += v
			}
		}
		m[c] = t
	}
	return m
}
