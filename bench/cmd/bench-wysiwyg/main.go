// Command bench-wysiwyg is `make bench-wysiwyg` (WYSIWYG containers):
//
//  1. real programs at a 1-core allocation, as CFS quota only (stock
//     Docker, --cpus 1) and as a WYSIWYG container placed by escrad
//     (escra.cpu=wysiwyg: an exclusive core, its online view kept
//     truthful): what nproc and /sys/devices/system/cpu/online say,
//     Debian's nginx with worker_processes auto under a gzip load (wrk),
//     and sysbench cpu --threads=$(nproc);
//  2. an Escra run whose quota crosses whole-core boundaries every few
//     periods (escrad with its real allocator on the real engine, quotas
//     sent every 100 ms by a scripted controller), with the invariants
//     sampled from the cgroup files every 100 ms and the cost of each
//     cpuset change;
//  3. WYSIWYG §V's simulation (bench/wysiwygsim) over C1 fractions
//     10-100 %, principle-hard and best-effort, default and optimized
//     placement, and its plots.
//
// It writes results/wysiwyg/summary.json, report.md and the plots.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

var (
	out        = flag.String("out", "results/wysiwyg", "output directory")
	phases     = flag.String("phases", "real,escra,sim", "phases to run")
	dur        = flag.Duration("duration", 10*time.Second, "each load run (wrk, sysbench)")
	reps       = flag.Int("reps", 3, "repetitions of each real-program case")
	escraDur   = flag.Duration("escra-duration", 20*time.Second, "the Escra run with moving quotas")
	machines   = flag.Int("machines", 100, "simulated machines")
	tasks      = flag.Int("tasks", 20000, "simulated tasks")
	docker     = flag.String("docker-host", "", "Docker engine socket (default: DOCKER_HOST or the standard socket)")
	namePrefix = flag.String("name-prefix", "wys-bench", "prefix of the containers it creates (on a shared engine, your own)")
)

func say(f string, a ...any) { fmt.Fprintf(os.Stderr, "bench-wysiwyg: "+f+"\n", a...) }

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-wysiwyg:", err)
		os.Exit(1)
	}
}

type summary map[string]any

func run() error {
	want := map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		switch p = strings.TrimSpace(p); p {
		case "real", "escra", "sim":
			want[p] = true
		case "":
		default:
			return fmt.Errorf("--phases: unknown phase %q (want real, escra, sim)", p)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	sum := summary{}
	var rep strings.Builder
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		var l1 float64
		fmt.Sscan(string(la), &l1)
		sum["host_loadavg1_at_start"] = l1
		fmt.Fprintf(&rep, "Host load average at start: %s (2 cores shared with other engineers' work: figures are noisy).\n\n", strings.Fields(string(la))[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if want["real"] || want["escra"] {
		e, err := newEnv(ctx, log)
		if err != nil {
			return err
		}
		defer e.close()
		if want["real"] {
			if err := e.realPrograms(ctx, sum, &rep); err != nil {
				return err
			}
		}
		if want["escra"] {
			if err := e.escraRun(ctx, sum, &rep); err != nil {
				return err
			}
			if err := pinClients(); err != nil {
				return err
			}
			if err := e.escraNginx(ctx, sum, &rep); err != nil {
				return err
			}
		}
	}
	if want["sim"] {
		if err := simulate(sum, &rep); err != nil {
			return err
		}
	}
	sum["duration_s"] = time.Since(t0).Seconds()
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "report.md"), []byte(rep.String()), 0o644); err != nil {
		return err
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%-40s %v\n", k, sum[k])
	}
	say("wrote %s/summary.json in %.0f s", *out, time.Since(t0).Seconds())
	return nil
}
