package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/escra-dev/escra/daemon/cgroups"
	"github.com/escra-dev/escra/daemon/containers"
	"github.com/escra-dev/escra/internal/dockertest"
	"github.com/escra-dev/escra/internal/load"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

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
	cr, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: c2})
	if err != nil {
		return err
	}
	e.created = append(e.created, cr.ID)
	if _, err := e.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
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
