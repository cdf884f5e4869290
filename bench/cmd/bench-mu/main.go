// Command bench-mu is `make bench-mu`: Mu's Table 3 and
// Table 5 comparisons, the load-balancer experiment and the placement
// simulation at this machine's scale; writes results/mu/summary.json,
// report.md and plots. Root (escrad writes cgroups).
//
// Environment: MU_T3_SECONDS (120), MU_T5_SECONDS (120), MU_LB_SECONDS
// (40), MU_SIM_CASES (500), MU_HOSTS (2 extra engines via
// scripts/hosts.sh; 0: the main engine only), MU_PARTS (sim,pred,lb,t3,t5; pred needs -trace),
// MU_WARM_SECONDS (20: each policy run starts with the replicas the
// trace's opening rate needs and runs this long at that rate, unmeasured;
// 0: from zero), MU_REPS (1: repetitions of Tables 3 and 5, each in its own shuffled
// policy order; 3 take about 35 minutes for Table 3 alone), MU_ORDER_SEED
// (default: new each run, printed and kept in summary.json as order_seed).
//
// With -trace FILE (an Azure Functions invocations-per-function-per-minute
// file) the part "pred" is Mu Fig. 2 over the file's functions (no
// Docker, no root), and Tables 3 and 5 replay its rows: Table 3 the
// -function given (a row number, or a hash: the first row carrying it) or
// else Fig. 2's median function; Table 5 the two most variable of the
// top 10 by peak. The window is -start's, else the one whose per-minute
// counts vary most (Table 5: both functions on one clock). Each trace
// minute lasts -minute-as; -scale multiplies Table 3's counts (default:
// fitted to the machine); Table 5's are ÷ 100 as Mu §4.1's.
// Every choice and scaling step is printed and kept in summary.json.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/escra-dev/escra/bench/mu"
	"github.com/escra-dev/escra/internal/dockertest"
)

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "bench-mu: %s=%q: want a non-negative integer\n", name, v)
			os.Exit(2)
		}
		return n
	}
	return def
}

func main() {
	out := flag.String("out", "results/mu", "output directory")
	trace := flag.String("trace", "", "Azure Functions per-minute invocations file (e.g. 500_inv.csv); empty: synthetic traces")
	fn := flag.String("function", "", "Table 3's function: a row number (1..) or a hash; empty: Fig. 2's median function")
	scale := flag.Float64("scale", 0, "multiplier of Table 3's per-minute counts (0: fit the machine)")
	minuteAs := flag.Duration("minute-as", time.Second, "how long one trace minute lasts (whole seconds)")
	start := flag.Int("start", 0, "first trace minute to replay (1..; 0: "+mu.WindowRule+"; Table 5: of its two functions' summed counts)")
	minInv := flag.Float64("min-invocations", mu.PaperMinInvocations, "Fig. 2 covers the functions with at least this many invocations in the file")
	docs := flag.String("docs", "docs/mu", "also write Fig. 2 and Fig. 3's SVGs here (empty: only -out)")
	flag.Parse()
	if *minuteAs < time.Second || *minuteAs%time.Second != 0 {
		fmt.Fprintf(os.Stderr, "bench-mu: -minute-as %v: want whole seconds, at least 1s\n", *minuteAs)
		os.Exit(2)
	}
	if *start < 0 || *scale < 0 || *minInv < 0 {
		fmt.Fprintln(os.Stderr, "bench-mu: -start, -scale and -min-invocations must not be negative")
		os.Exit(2)
	}
	if *trace == "" && *fn != "" {
		fmt.Fprintln(os.Stderr, "bench-mu: -function needs -trace")
		os.Exit(2)
	}
	cfg := mu.Config{Out: *out, RepoRoot: dockertest.RepoRoot(),
		T3Seconds: envInt("MU_T3_SECONDS", 120), T5Seconds: envInt("MU_T5_SECONDS", 120),
		LBSeconds: envInt("MU_LB_SECONDS", 40), SimCases: envInt("MU_SIM_CASES", 500),
		Hosts: envInt("MU_HOSTS", 2), Seed: 3, Reps: max(1, envInt("MU_REPS", 1)), WarmSeconds: envInt("MU_WARM_SECONDS", 20),
		OrderSeed: int64(envInt("MU_ORDER_SEED", int(time.Now().UnixNano()%1_000_000_000))),
		Log:       func(s string) { fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), s) },
		Trace: mu.TraceConfig{File: *trace, Function: *fn, Scale: *scale, MinuteAs: int(*minuteAs / time.Second), Start: *start - 1,
			MinInvocations: *minInv, DocsDir: *docs}}
	if *trace == "" {
		cfg.Trace.DocsDir = ""
	}
	if p := os.Getenv("MU_PARTS"); p != "" {
		cfg.Parts = strings.Split(p, ",")
		for _, x := range cfg.Parts {
			switch x {
			case "sim", "pred", "lb", "t3", "t5":
			default:
				fmt.Fprintf(os.Stderr, "bench-mu: MU_PARTS: unknown part %q (want sim, pred, lb, t3, t5)\n", x)
				os.Exit(2)
			}
		}
	}
	if slices.Contains(cfg.Parts, "pred") && *trace == "" {
		fmt.Fprintln(os.Stderr, "bench-mu: MU_PARTS=pred needs -trace FILE")
		os.Exit(2)
	}
	docker := len(cfg.Parts) == 0
	for _, x := range cfg.Parts {
		docker = docker || x == "lb" || x == "t3" || x == "t5"
	}
	if docker && os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-mu: must run as root (escrad writes cgroups; MU_PARTS=sim,pred runs without)")
		os.Exit(1)
	}
	fmt.Printf("bench-mu: %d repetition(s), order seed %d (MU_ORDER_SEED replays the order)\n", cfg.Reps, cfg.OrderSeed)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := mu.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-mu:", err)
		os.Exit(1)
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println("summary (" + *out + "/summary.json):")
	for _, k := range keys {
		fmt.Printf("  %-36s %10.2f\n", k, sum[k])
	}
}
