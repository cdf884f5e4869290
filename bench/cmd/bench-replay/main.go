// Command bench-replay evaluates every static baseline and the real
// allocator offline, in a fluid model of each cell's containers
// (bench/replay), on a profiling run's per-100 ms usage:
//
//	bench-replay -profiles results/bench/profiles.json [-cells c1,c2] [-app-cores 1] [-release 0,3] [-json]
//	bench-replay -model [-cells ...] [-duration 18s] [-cycle 6s] [-seed 1] [-write-profiles f.json]
//	bench-replay ... -trace 1   (also Escra's every period at 1 × the ideal profile)
//
// -model builds the profiles from the cells' own request schedules and
// nominal CPU per request (matrix.DemandModel) instead of a run, with the
// profiling seed bench-run uses. It prints, per cell and policy, the
// reserved cores, the share of container-periods the limit bound, the
// demand that waited (core-seconds), the longest backlog (seconds) and the
// most served together in one period; then each cell's oracle share.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/escra-dev/escra/bench/matrix"
	"github.com/escra-dev/escra/bench/replay"
	"github.com/escra-dev/escra/controller/allocator"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-replay:", err)
		os.Exit(1)
	}
}

// defaultCells are the cells -model builds when -cells is not given: the
// offset cells and two of today's cells whose containers peak together.
const defaultCells = "offset-pair/burst,front-worker/periodic,fanout/shift,demo-http/burst,chain/burst"

func run(args []string) error {
	fs := flag.NewFlagSet("bench-replay", flag.ContinueOnError)
	profiles := fs.String("profiles", "", "profiles.json of a bench-run (per-100 ms CPU of every container)")
	model := fs.Bool("model", false, "build the profiles from the cells' request schedules instead of a run")
	cells := fs.String("cells", "", "comma list of workload/load (default: every cell of -profiles; with -model "+defaultCells+")")
	appCores := fs.Float64("app-cores", 1, "CPUs of the app's cpuset (bench-run's -app-cpus count)")
	release := fs.String("release", "", "comma list of allocator release periods to compare (default: the allocator's default)")
	events := fs.Bool("events", true, "feed near-throttle events inside a period, as escrad sends them")
	duration := fs.Duration("duration", 18*time.Second, "-model: run length (bench-run quick: 18 s)")
	cycle := fs.Duration("cycle", 6*time.Second, "-model: Burst cycle (bench-run quick: 6 s; full: 20 s)")
	seed := fs.Int64("seed", 1, "-model: bench-run's -seed (the profile uses seed + matrix.ProfileSeedOffset)")
	write := fs.String("write-profiles", "", "-model: also write the profiles in profiles.json format here")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	trace := fs.Float64("trace", 0, "also print, per cell, Escra's every period at k × the ideal profile's total (e.g. 1): each container's want, served and quota (ms per period)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if (*profiles == "") == !*model {
		return fmt.Errorf("give exactly one of -profiles and -model")
	}
	if !(*appCores > 0) {
		return fmt.Errorf("-app-cores %v: want > 0", *appCores)
	}
	var ps []replay.Profile
	var err error
	if *model {
		if *cells == "" {
			*cells = defaultCells
		}
		if ps, err = modelProfiles(list(*cells), *duration, *cycle, *seed); err != nil {
			return err
		}
		if *write != "" {
			if err := replay.WriteProfiles(*write, ps); err != nil {
				return err
			}
		}
	} else {
		if ps, err = replay.ReadProfiles(*profiles); err != nil {
			return err
		}
		if *cells != "" {
			ps, err = pick(ps, list(*cells))
			if err != nil {
				return err
			}
		}
	}
	rels := []int{allocator.DefaultParams().ReleasePeriods}
	if *release != "" {
		rels = nil
		for _, f := range list(*release) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return fmt.Errorf("-release %q: want periods >= 0", f)
			}
			rels = append(rels, n)
		}
	}
	if *trace < 0 {
		return fmt.Errorf("-trace %v: want k > 0", *trace)
	}
	var out []replay.CellResult
	for _, p := range ps {
		if *trace > 0 {
			if err := printTrace(p, *appCores, *trace, *events); err != nil {
				return err
			}
		}
		var merged replay.CellResult
		for ri, r := range rels {
			par := allocator.DefaultParams()
			par.ReleasePeriods = r
			cr, err := replay.Evaluate(p, *appCores, replay.EscraOptions{Params: par, Events: *events})
			if err != nil {
				return fmt.Errorf("%s: %w", p.Cell(), err)
			}
			merged.Cell = cr.Cell
			for _, res := range cr.Results {
				isEscra := strings.HasPrefix(res.Policy, "escra")
				if ri > 0 && !isEscra {
					continue // the baselines do not depend on the allocator
				}
				if isEscra && len(rels) > 1 {
					res.Policy += fmt.Sprintf(" release=%d", r)
				}
				merged.Results = append(merged.Results, res)
			}
		}
		out = append(out, merged)
	}
	if *asJSON {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		return e.Encode(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\tpolicy\treserved cores\tthrottled %\twaiting core-s\tmax backlog s\tmean Σ quota\tpeak Σ served\t")
	for _, c := range out {
		for _, r := range c.Results {
			fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.1f\t%.3f\t%.2f\t%.3f\t%.3f\t\n", c.Cell, r.Policy, r.ReservedCores, 100*r.ThrottledShare, r.WaitingCoreS, r.MaxBacklogS, r.QuotaCores, r.PeakServedCores)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("\noracle share of static15 (the budget that serves every container as static15 does, period by period, ÷ static15's):")
	for _, p := range ps {
		fmt.Printf("  %-24s %.3f\n", p.Cell(), replay.OracleShare(p, *appCores))
	}
	return nil
}

// printTrace prints Escra's periods on one cell at k × Σ Peak1s.
func printTrace(p replay.Profile, appCores, k float64, events bool) error {
	budget := 0.0
	for _, l := range replay.Limits(p, appCores, replay.StaticK(k)) {
		budget += l
	}
	fmt.Printf("%s: Escra at %.3f cores (%g × the ideal profile); per container want/served/quota, ms per period\n", p.Cell(), budget, k)
	m := replay.Model{Demand: p.CPU, AppCores: appCores}
	_, err := m.Escra("trace", budget, replay.EscraOptions{Params: allocator.DefaultParams(), Events: events,
		Trace: func(period int, want, served, quota []float64) {
			fmt.Printf("%5d", period)
			for i := range want {
				fmt.Printf("  %6.1f/%6.1f/%6.1f", want[i]/1000, served[i]/1000, quota[i]/1000)
			}
			fmt.Println()
		}})
	if err != nil {
		return fmt.Errorf("%s: %w", p.Cell(), err)
	}
	fmt.Println()
	return nil
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func pick(ps []replay.Profile, cells []string) ([]replay.Profile, error) {
	var out []replay.Profile
	for _, c := range cells {
		found := false
		for _, p := range ps {
			if p.Cell() == c {
				out, found = append(out, p), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no profile of %s", c)
		}
	}
	return out, nil
}

func modelProfiles(cells []string, d, cycle time.Duration, seed int64) ([]replay.Profile, error) {
	var out []replay.Profile
	for _, c := range cells {
		wn, ln, ok := strings.Cut(c, "/")
		w, found := matrix.WorkloadByName(wn)
		if !ok || !found {
			return nil, fmt.Errorf("cell %q: want workload/load of a known workload", c)
		}
		var ports []int
		for i := range w.Replicas {
			ports = append(ports, 18080+i)
		}
		cpu, err := matrix.DemandModel(w, matrix.ClientRun{Load: ln, Ports: ports, Duration: d, Seed: seed + matrix.ProfileSeedOffset, BurstCycle: cycle})
		if err != nil {
			return nil, fmt.Errorf("cell %s: %w", c, err)
		}
		out = append(out, replay.Profile{Workload: wn, Load: ln, CPU: cpu})
	}
	return out, nil
}
