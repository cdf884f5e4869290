package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/spec"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

// profileCmd is WYSIWYG §IV-C's container type determination: the app is
// evaluated under CFS quota and under a cpuset of the same size, for
// several allocations and repetitions, on the real engine; it is C1
// (escra.cpu=wysiwyg) if the cpuset performs better in most evaluations.
func profileCmd(e *env) *cobra.Command {
	var o profileOpts
	c := &cobra.Command{
		Use:   "profile -f FILE [--workload CMD]",
		Short: "Decide whether a container needs escra.cpu=wysiwyg (WYSIWYG §IV-C)",
		Long: `profile runs the spec's first container on the local Docker engine under
CFS quota and under a cpuset of the same size, for each allocation and
repetition, and says whether it is processor-sensitive (C1: label it
escra.cpu=wysiwyg) or not (C2: shared). The cpuset must win by more than
--margin in most evaluations.`,
		Example: `  escractl profile -f shop.yaml
  escractl profile -f shop.yaml --workload 'sysbench cpu --threads=$(nproc) run' --score output --cpus 1,0.5`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runProfile(e, o) },
	}
	f := c.Flags()
	f.StringVarP(&o.file, "filename", "f", "", "spec file; its first container is profiled")
	f.StringVar(&o.workload, "workload", "", "command run in the container (default: its own command)")
	f.StringVar(&o.cpus, "cpus", "1", "allocations to try, comma-separated cores")
	f.IntVar(&o.reps, "reps", 3, "repetitions per allocation (1-100)")
	f.StringVar(&o.score, "score", "time", "time (run time, lower is better) or output (the workload's last number, higher is better)")
	f.StringVar(&o.dockerHost, "docker-host", "", "Docker engine (default $DOCKER_HOST or the local socket)")
	f.StringVar(&o.prefix, "name-prefix", "escra-profile", "prefix of the containers it creates")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on one evaluation")
	f.Float64Var(&o.margin, "margin", 0.05, "share by which the cpuset must win, in [0, 1)")
	f.StringVar(&o.record, "record", "", "also store the verdict for the image in DIR (escrad --cpu-profiles, default "+wysiwyg.DefaultProfileDir+"): escrad then places its escra.cpu=auto containers by it")
	return c
}

type profileOpts struct {
	file, workload, cpus, score, dockerHost, prefix, record string
	reps                                                    int
	timeout                                                 time.Duration
	margin                                                  float64
}

func runProfile(e *env, o profileOpts) error {
	file, workload, cpus, reps, score, dockerHost, prefix, timeout, margin :=
		&o.file, &o.workload, &o.cpus, &o.reps, &o.score, &o.dockerHost, &o.prefix, &o.timeout, &o.margin
	if *file == "" {
		return usageErr("profile: -f SPEC is required (the app's first container is profiled)")
	}
	if *score != "time" && *score != "output" {
		return usageErr("profile: --score %q: want time or output", *score)
	}
	if *score == "output" && *workload == "" {
		return usageErr("profile: --score output reads the workload's output: give --workload CMD")
	}
	if *margin < 0 || *margin >= 1 {
		return usageErr("profile: --margin %g: want a share in [0, 1)", *margin)
	}
	if *reps < 1 || *reps > 100 {
		return usageErr("profile: --reps %d: want 1-100", *reps)
	}
	app, err := spec.Load(*file)
	if err != nil {
		return err
	}
	if len(app.Containers) == 0 {
		return fmt.Errorf("%s: app %s has no containers to profile", *file, app.Name)
	}
	ctr := app.Containers[0]
	ncpu := hostCPUCount()
	var allocs []float64
	for _, f := range strings.Split(*cpus, ",") {
		v, err := spec.ParseCPU(strings.TrimSpace(f))
		if err != nil {
			return usageErr("profile: --cpus %q: %v", *cpus, err)
		}
		if v <= 0 || math.Ceil(v) >= float64(ncpu) {
			return usageErr("profile: --cpus %g: a cpuset of the same size needs fewer than the host's %d CPUs", v, ncpu)
		}
		allocs = append(allocs, v)
	}
	opts := []client.Opt{client.FromEnv}
	if *dockerHost != "" {
		opts = append(opts, client.WithHost(*dockerHost))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer cli.Close()
	if _, err := cli.Ping(e.ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("docker engine unreachable: %w", err)
	}
	p := &profiler{e: e, cli: cli, ctr: ctr, workload: *workload, score: *score, prefix: *prefix, timeout: *timeout, ncpu: ncpu}
	fmt.Fprintf(e.stdout, "profiling %s/%s (%s): %d allocation(s) x %d repetition(s), quota vs cpuset; score: %s; cpuset better = by more than %g %%\n",
		app.Name, ctr.Name, ctr.Image, len(allocs), *reps, map[string]string{"time": "run time, lower is better", "output": "workload's last number, higher is better"}[*score], 100**margin)
	t := newTable([]int{0, 1, 2, 3, 4}, "CPUS", "REP", "QUOTA", "CPUSET", "CPUSET BETTER")
	wins, total := 0, 0
	for _, a := range allocs {
		for r := 0; r < *reps; r++ {
			order := []bool{false, true}
			if r%2 == 1 {
				order = []bool{true, false}
			}
			var q, s float64
			for _, cs := range order {
				v, err := p.one(a, cs)
				if err != nil {
					return err
				}
				if cs {
					s = v
				} else {
					q = v
				}
			}
			// WYSIWYG §IV-C: "better under CPU set"; ours: by more than
			// the margin, so that noise on a shared host is not a verdict.
			better := s > q*(1+*margin)
			if *score == "time" {
				better = s < q*(1-*margin)
			}
			if better {
				wins++
			}
			total++
			t.add(strconv.FormatFloat(a, 'g', -1, 64), strconv.Itoa(r+1), p.format(q), p.format(s), strconv.FormatBool(better))
		}
	}
	t.write(e.stdout, e.width)
	verdict, label := "C2 (not processor sensitive)", "shared"
	if 2*wins > total {
		verdict, label = "C1 (processor sensitive: needs WYSIWYG)", "wysiwyg"
	}
	fmt.Fprintf(e.stdout, "cpuset better in %d of %d evaluations: %s; label its containers escra.cpu=%s\n", wins, total, verdict, label)
	if o.record == "" {
		return nil
	}
	// Keyed by image ID, which escrad reads from docker inspect: any tag
	// of this image, on any host with the same file, resolves the same.
	ins, err := cli.ImageInspect(e.ctx, ctr.Image)
	if err != nil {
		return fmt.Errorf("profile --record: image %s: %w", ctr.Image, err)
	}
	if err := wysiwyg.RecordProfile(o.record, ins.ID, label); err != nil {
		return fmt.Errorf("profile --record: %w", err)
	}
	fmt.Fprintf(e.stdout, "recorded %s for image %s in %s: escra.cpu=auto containers of it are placed %s\n", label, ins.ID, o.record, label)
	return nil
}

type profiler struct {
	e        *env
	cli      *client.Client
	ctr      spec.Container
	workload string
	score    string
	prefix   string
	timeout  time.Duration
	ncpu     int
}

func (p *profiler) format(v float64) string {
	if p.score == "time" {
		return fmt.Sprintf("%.3fs", v)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// one runs one evaluation: the container with quota a, and with cpuset
// (the ⌈a⌉ highest-numbered CPUs) when cpuset is set; it returns the run
// time (the container's own, or the workload's) or the workload's number.
func (p *profiler) one(a float64, cpuset bool) (float64, error) {
	ctx, cancel := context.WithTimeout(p.e.ctx, p.timeout)
	defer cancel()
	env := make([]string, 0, len(p.ctr.Env))
	for k, v := range p.ctr.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cfg := &container.Config{Image: p.ctr.Image, Env: env, Labels: map[string]string{"escra.profile": "1"}}
	if len(p.ctr.Command) > 0 {
		cfg.Entrypoint = p.ctr.Command
	}
	netMode := p.ctr.Network
	if netMode == "" {
		netMode = "none"
	}
	hc := &container.HostConfig{NetworkMode: container.NetworkMode(netMode)}
	hc.Resources.CPUPeriod = 100000
	hc.Resources.CPUQuota = int64(math.Round(a * 100000))
	kind := "quota"
	if cpuset {
		n := int(math.Ceil(a))
		hc.Resources.CpusetCpus = fmt.Sprintf("%d-%d", p.ncpu-n, p.ncpu-1)
		kind = "cpuset"
	}
	name := fmt.Sprintf("%s-%s-%d-%d", p.prefix, kind, os.Getpid(), time.Now().UnixNano()%1e9)
	cr, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", name, err)
	}
	defer func() {
		rctx, rc := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = p.cli.ContainerRemove(rctx, cr.ID, client.ContainerRemoveOptions{Force: true})
		rc()
	}()
	start := time.Now()
	if _, err := p.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return 0, fmt.Errorf("start %s: %w", name, err)
	}
	if p.workload == "" { // a batch app: its own run time
		wr := p.cli.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		wc, ec := wr.Result, wr.Error
		select {
		case w := <-wc:
			if w.StatusCode != 0 {
				return 0, fmt.Errorf("container %s exited with status %d", name, w.StatusCode)
			}
		case err := <-ec:
			return 0, fmt.Errorf("wait for %s: %w", name, err)
		}
		return time.Since(start).Seconds(), nil
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", p.workload)
	cmd.Env = append(os.Environ(), "ESCRA_PROFILE_CONTAINER="+cr.ID)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("workload %q against %s: %v: %s", p.workload, kind, err, lastLine(out.String()))
	}
	if p.score == "time" {
		return time.Since(t0).Seconds(), nil
	}
	f := strings.Fields(lastLine(out.String()))
	for i := len(f) - 1; i >= 0; i-- {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("workload %q printed no number on its last line: %q", p.workload, lastLine(out.String()))
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func hostCPUCount() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, ok := strings.Cut(part, "-")
		a, _ := strconv.Atoi(lo)
		if !ok {
			n++
			continue
		}
		z, _ := strconv.Atoi(hi)
		n += z - a + 1
	}
	return n
}
