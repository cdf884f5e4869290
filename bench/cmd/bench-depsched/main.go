// Command bench-depsched is make bench-depsched: the simulation of
// dependency-aware scheduling (§6) at its default setting through the controller/placement profiles, the
// scheduling-time measurement of §7.2, and (with -real) the benchmark on
// real engines and a real registry. It writes results/depsched/summary.json
// (flat keys), report.txt and the figures (fig3.svg, fig5*.svg, fig6.svg).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/placement/depsim"
	"golang.org/x/sys/unix"
)

var (
	out      = flag.String("out", "results/depsched", "output directory")
	parts    = flag.String("parts", "sim,sched,real", "which parts to run (comma-separated: sim, sched, real)")
	sweep    = flag.Bool("sweep", true, "also the Fig 5 sweeps (cluster size, store size, load)")
	simDur   = flag.Float64("sim-duration", 900, "simulated seconds of arrivals per run (the first half is warm-up)")
	sweepDur = flag.Float64("sweep-duration", 400, "simulated seconds per run of the Fig 5 sweeps")
	seed     = flag.Int64("seed", 4, "simulation seed")
)

var (
	summary = map[string]any{}
	report  []string
)

func say(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	fmt.Println(line)
	report = append(report, line)
}

func main() {
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "depsched:", err)
		os.Exit(1)
	}
	// Keep the other half's keys when only one half runs.
	if b, err := os.ReadFile(filepath.Join(*out, "summary.json")); err == nil {
		_ = json.Unmarshal(b, &summary)
	}
	var err error
	for _, p := range strings.Split(*parts, ",") {
		switch p {
		case "sim":
			err = simulate()
		case "sched":
			err = schedTime()
		case "real":
			err = realBench()
		default:
			err = fmt.Errorf("-parts: unknown part %q (want sim, sched, real)", p)
		}
		if err != nil {
			break
		}
	}
	if werr := write(); err == nil {
		err = werr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "depsched:", err)
		os.Exit(1)
	}
}

func write() error {
	b, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "report.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
}

func key(s string) string { return strings.ReplaceAll(s, "-", "_") }

func simulate() error {
	t0 := time.Now()
	cc := depsim.DefaultCorpus()
	cc.Seed = *seed
	cp, err := depsim.NewCorpus(cc)
	if err != nil {
		return err
	}
	st := cp.Stats()
	say("sim corpus: %d images, %d unique of %d layer references (%.0f %% unique; dependency-aware scheduling: 57 %%), %.2f layers/image (11.95), mean image %.0f MB (590), mean layer pull %.2f s (1.75), mean image pull %.1f s (19.2)",
		st.Images, st.Layers, st.LayerRefs, 100*st.UniqueFrac, st.LayersPerImage, st.MeanImageBytes/1e6, st.MeanLayerPullS, st.MeanImagePullS)
	summary["sim_corpus_images"] = st.Images
	summary["sim_corpus_unique_layer_frac"] = st.UniqueFrac
	summary["sim_corpus_layers_per_image"] = st.LayersPerImage
	summary["sim_corpus_mean_layer_pull_s"] = st.MeanLayerPullS
	summary["sim_corpus_mean_image_pull_s"] = st.MeanImagePullS

	base := depsim.Default()
	base.Seed = *seed
	base.DurationS, base.WarmupS = *simDur, *simDur/2
	rate, err := depsim.Calibrate(base, cp, 0.8)
	if err != nil {
		return err
	}
	base.Rate = rate
	say("sim: %d nodes x %d slots, %.0f GB store each, %.1f arrivals/s (80 %% agnostic utilisation), %.0f s of arrivals, second half measured", base.Nodes, base.Slots, float64(base.CacheBytes)/1e9, rate, base.DurationS)
	summary["sim_rate_per_s"] = rate

	run := func(c depsim.Config) (*depsim.Result, error) {
		t := time.Now()
		r, err := depsim.Run(c, cp)
		if err != nil {
			return nil, err
		}
		say("  %-13s %-9s %-10s n=%6d mean %6.2f s  p50 %6.2f  p90 %6.2f  p99 %6.2f  compute %4.1f %%  images/node %5.1f  unused %5.2f GB  (%.1fs)",
			c.Policy, c.Evict, c.Access, r.Requests, r.MeanStartupS, r.P50S, r.P90S, r.P99S, 100*r.ComputeUsage, r.CachedImages, r.UnusedBytes/1e9, time.Since(t).Seconds())
		return r, nil
	}
	// Fig 3 / Table 2: the policies at the default setting.
	res := map[string]*depsim.Result{}
	pols := []string{"random", "least-loaded", "imagelocality", "image-match", "layer-match"}
	for _, p := range pols {
		c := base
		c.Policy = p
		if res[p], err = run(c); err != nil {
			return err
		}
	}
	ag := res["random"].MeanStartupS
	for _, p := range pols {
		r := res[p]
		summary["sim_mean_startup_s_"+key(p)] = r.MeanStartupS
		summary["sim_p50_startup_s_"+key(p)] = r.P50S
		summary["sim_compute_usage_"+key(p)] = r.ComputeUsage
		summary["sim_cached_images_"+key(p)] = r.CachedImages
		summary["sim_unused_store_bytes_"+key(p)] = r.UnusedBytes
		if p != "random" {
			summary["sim_"+key(p)+"_speedup"] = ag / r.MeanStartupS
		}
	}
	summary["sim_lru_image_startup_s"] = res["layer-match"].MeanStartupS
	say("sim speedup vs agnostic (dependency-aware scheduling §6.2: image-match 1.44, layer-match 2.33): image-match %.2f, layer-match %.2f, ImageLocality %.2f, least-loaded %.2f",
		summary["sim_image_match_speedup"], summary["sim_layer_match_speedup"], summary["sim_imagelocality_speedup"], summary["sim_least_loaded_speedup"])
	var cdfs []series
	for _, p := range pols {
		cdfs = append(cdfs, cdf(p, res[p].Startups))
	}
	if err := linePlot(filepath.Join(*out, "fig3.svg"), "Startup latency CDF (sim, defaults; cf. dependency-aware scheduling Fig 3)", "startup latency (s, log)", "CDF", cdfs, true); err != nil {
		return err
	}

	// Table 3: eviction under layer-match.
	for _, ev := range []string{"lru-layer", "lfu-layer"} {
		c := base
		c.Policy, c.Evict = "layer-match", ev
		r, err := run(c)
		if err != nil {
			return err
		}
		summary["sim_"+key(ev)+"_startup_s"] = r.MeanStartupS
		summary["sim_"+key(ev)+"_compute_usage"] = r.ComputeUsage
		summary["sim_"+key(ev)+"_cached_images"] = r.CachedImages
	}
	say("sim eviction under layer-match (dependency-aware scheduling Table 3: 6.5 / 5.65 / 5.42 s): LRU-image %.2f s, LRU-layer %.2f s, LFU-layer %.2f s",
		summary["sim_lru_image_startup_s"], summary["sim_lru_layer_startup_s"], summary["sim_lfu_layer_startup_s"])

	// Fig 6: the access pattern.
	groups := []string{"zipf", "uniform", "popularity"}
	sp := map[string][]float64{}
	for _, acc := range groups {
		rr := map[string]*depsim.Result{}
		if acc == "zipf" {
			rr = res
		} else {
			for _, p := range []string{"random", "image-match", "layer-match"} {
				c := base
				c.Policy, c.Access = p, acc
				if rr[p], err = run(c); err != nil {
					return err
				}
			}
		}
		for _, p := range []string{"image-match", "layer-match"} {
			s := rr["random"].MeanStartupS / rr[p].MeanStartupS
			sp[p] = append(sp[p], s)
			if acc != "zipf" {
				summary["sim_"+acc+"_"+key(p)+"_speedup"] = s
			}
		}
	}
	say("sim access pattern speedups (dependency-aware scheduling Fig 6; popularity: 19x / 21x): uniform %.2f / %.2f, popularity %.2f / %.2f (image-/layer-match)",
		sp["image-match"][1], sp["layer-match"][1], sp["image-match"][2], sp["layer-match"][2])
	if err := barPlot(filepath.Join(*out, "fig6.svg"), "Speedup vs agnostic by access pattern (cf. dependency-aware scheduling Fig 6)", "speedup (x)", groups,
		[]series{{name: "image-match", y: sp["image-match"]}, {name: "layer-match", y: sp["layer-match"]}}); err != nil {
		return err
	}

	if *sweep {
		if err := sweeps(base, cp, run); err != nil {
			return err
		}
	}
	summary["sim_wall_s"] = time.Since(t0).Seconds()
	return nil
}

// sweeps are Fig 5 a–c: speedups as one parameter moves, the rest at
// their defaults (the arrival rate scales with the cluster in 5a so the
// load stays ~80 %).
func sweeps(base depsim.Config, cp *depsim.Corpus, run func(depsim.Config) (*depsim.Result, error)) error {
	base.DurationS, base.WarmupS = *sweepDur, *sweepDur/2
	def := map[string]float64{}
	type point struct {
		label string
		x     float64
		set   func(*depsim.Config)
	}
	figs := []struct {
		file, title, xlab string
		pts               []point
	}{
		{"fig5a.svg", "Speedup vs cluster size (cf. Fig 5a)", "nodes", []point{
			{"50", 50, func(c *depsim.Config) { c.Nodes = 50; c.Rate = base.Rate / 4 }},
			{"100", 100, func(c *depsim.Config) { c.Nodes = 100; c.Rate = base.Rate / 2 }},
			{"200", 200, func(*depsim.Config) {}}}},
		{"fig5b.svg", "Speedup vs per-node store (cf. Fig 5b)", "store (GB)", []point{
			{"16", 16, func(c *depsim.Config) { c.CacheBytes = 16e9 }},
			{"32", 32, func(*depsim.Config) {}},
			{"64", 64, func(c *depsim.Config) { c.CacheBytes = 64e9 }}}},
		{"fig5c.svg", "Speedup vs offered load (cf. Fig 5c)", "arrivals/s", []point{
			{"0.6x", base.Rate * 0.6, func(c *depsim.Config) { c.Rate = base.Rate * 0.6 }},
			{"1x", base.Rate, func(*depsim.Config) {}},
			{"1.15x", base.Rate * 1.15, func(c *depsim.Config) { c.Rate = base.Rate * 1.15 }}}},
	}
	for _, f := range figs {
		im := series{name: "image-match"}
		lm := series{name: "layer-match"}
		for _, pt := range f.pts {
			m := map[string]float64{}
			if pt.label == "200" || pt.label == "32" || pt.label == "1x" {
				m = def // the default setting, run once for all three sweeps
			}
			for _, p := range []string{"random", "image-match", "layer-match"} {
				if m[p] > 0 {
					continue
				}
				c := base
				c.Policy = p
				pt.set(&c)
				r, err := run(c)
				if err != nil {
					return err
				}
				m[p] = r.MeanStartupS
			}
			im.x, im.y = append(im.x, pt.x), append(im.y, m["random"]/m["image-match"])
			lm.x, lm.y = append(lm.x, pt.x), append(lm.y, m["random"]/m["layer-match"])
			say("  %s %s: speedup image-match %.2f, layer-match %.2f", f.xlab, pt.label, m["random"]/m["image-match"], m["random"]/m["layer-match"])
		}
		if err := linePlot(filepath.Join(*out, f.file), f.title, f.xlab, "speedup vs agnostic (x)", []series{im, lm}, false); err != nil {
			return err
		}
	}
	return nil
}

// schedTime is the scheduling computation time of dependency-aware
// scheduling §7.2: every host pre-warmed with 100 images (~1,000 layers), 1,000 consecutive requests,
// the wall time of one placement.Schedule each.
func schedTime() error {
	cc := depsim.DefaultCorpus()
	cc.Images = 20000
	cp, err := depsim.NewCorpus(cc)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(*seed))
	// The thread's CPU time is the computation (§7.2) without the time
	// this loaded machine's other processes take the core away.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The computation alone (§7.2): no collector pauses in the samples.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, hosts := range []int{4, 200} {
		var nodes []*placement.Node
		layers := 0
		for i := 0; i < hosts; i++ {
			d := placement.NewHostDeps()
			for k := 0; k < 100; k++ {
				im := cp.Images[rng.Intn(len(cp.Images))].Req.Deps
				d.Images[im.Name] = true
				for _, l := range im.Layers {
					d.Layers[l.DiffID] = true
				}
			}
			layers += len(d.Layers)
			nodes = append(nodes, &placement.Node{Name: fmt.Sprintf("h%d", i), Index: i, CPUCap: 16, CPUFree: 16,
				AppCount: map[string]int{}, Ext: map[string]any{placement.DepsKey: d}})
		}
		for _, pol := range []string{"random", "image-match", "layer-match", "imagelocality"} {
			prof, _ := placement.DepProfile(pol, rand.New(rand.NewSource(*seed)))
			var wall, cpu []float64
			runtime.GC()
			for k := 0; k < 1000; k++ {
				req := &cp.Images[rng.Intn(len(cp.Images))].Req
				c0 := threadCPU()
				t := time.Now()
				if _, err := prof.Schedule(req, nodes); err != nil {
					return err
				}
				wall = append(wall, float64(time.Since(t).Nanoseconds())/1e3)
				cpu = append(cpu, float64(threadCPU()-c0)/1e3)
			}
			sort.Float64s(wall)
			sort.Float64s(cpu)
			q := func(v []float64, p int) float64 { return v[len(v)*p/100] }
			name := fmt.Sprintf("%s_%dhosts", key(pol), hosts)
			summary["scheduling_time_p99_us_"+name] = q(cpu, 99)
			summary["scheduling_time_p50_us_"+name] = q(cpu, 50)
			summary["scheduling_wall_time_p99_us_"+name] = q(wall, 99)
			if pol == "layer-match" && hosts == 200 {
				summary["scheduling_time_p99_us"] = q(cpu, 99)
				summary["scheduling_wall_time_p99_us"] = q(wall, 99)
			}
			say("scheduling time, %d hosts x 100 images (%d layers/host), %-13s: CPU p50 %4.0f us, p99 %4.0f us; wall p50 %4.0f us, p99 %5.0f us",
				hosts, layers/hosts, pol, q(cpu, 50), q(cpu, 99), q(wall, 50), q(wall, 99))
		}
	}
	return nil
}

// threadCPU is this OS thread's CPU time in nanoseconds.
func threadCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}
