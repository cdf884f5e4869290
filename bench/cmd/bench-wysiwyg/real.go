package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

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
	// (sysbench --threads=$(nproc), the usual way to size it).
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
	rc, err := e.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
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
