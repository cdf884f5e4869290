package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/escra-dev/escra/bench/wysiwygsim"
	"github.com/escra-dev/escra/internal/wysiwyg"
)

type simCurve struct {
	name string
	mode wysiwyg.Mode
	opt  bool
	s, r plotter.XYs
}

// simulate runs WYSIWYG §V's sweep and draws Fig. 4 (a: s, b: r).
func simulate(sum summary, rep *strings.Builder) error {
	t0 := time.Now()
	tr := wysiwygsim.Synthesize(wysiwygsim.TraceConfig{Machines: *machines, Tasks: *tasks, Seed: 1})
	curves := []*simCurve{
		{name: "principle-hard, optimized", mode: wysiwyg.Hard, opt: true},
		{name: "principle-hard, default", mode: wysiwyg.Hard, opt: false},
		{name: "best-effort, optimized", mode: wysiwyg.BestEffort, opt: true},
		{name: "best-effort, default", mode: wysiwyg.BestEffort, opt: false},
	}
	fmt.Fprintf(rep, "## Simulation (WYSIWYG §V)\n\nSynthetic trace shaped like the Google trace (not available offline): %d machines, %d tasks, offered load 1.3x capacity, no overcommit.\n\n", *machines, *tasks)
	fmt.Fprintf(rep, "| C1 %% | s hard opt | s hard default | s best-effort opt | r hard opt | r hard default | refused for CPU (hard opt) |\n|---|---|---|---|---|---|---|\n")
	for f := 10; f <= 100; f += 10 {
		var row []wysiwygsim.Result
		for _, c := range curves {
			res, err := wysiwygsim.Run(tr, wysiwygsim.Config{C1Fraction: float64(f) / 100, Mode: c.mode, Optimized: c.opt})
			if err != nil {
				return err
			}
			c.s = append(c.s, plotter.XY{X: float64(f), Y: res.SPct})
			c.r = append(c.r, plotter.XY{X: float64(f), Y: res.RPct})
			suffix := ""
			if !c.opt {
				suffix = "_default"
			}
			sum[fmt.Sprintf("sim_s_pct_%s_%d%s", c.mode, f, suffix)] = round2(res.SPct)
			sum[fmt.Sprintf("sim_r_pct_%s_%d%s", c.mode, f, suffix)] = round2(res.RPct)
			row = append(row, res)
		}
		fmt.Fprintf(rep, "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %d |\n", f, row[0].SPct, row[1].SPct, row[2].SPct, row[0].RPct, row[1].RPct, row[0].NoCapacity)
		say("simulated C1 fraction %d %% (%.0f s)", f, time.Since(t0).Seconds())
	}
	sum["sim_machines"], sum["sim_tasks"] = *machines, *tasks
	for _, which := range []string{"s", "r"} {
		p := plot.New()
		p.X.Label.Text = "fraction of C1 containers (%)"
		if which == "s" {
			p.Title.Text = "Shared C1 CPU time s (%), lower is better"
		} else {
			p.Title.Text = "C1 reject rate r for WYSIWYG (%)"
		}
		p.Legend.Top, p.Legend.Left = true, true
		cols := []color.RGBA{{0xd6, 0x27, 0x28, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0x7f, 0x7f, 0x7f, 0xff}}
		for i, c := range curves {
			pts := c.s
			if which == "r" {
				pts = c.r
			}
			l, sc, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, sc.Color = cols[i], cols[i]
			sc.Shape = draw.CircleGlyph{}
			p.Add(l, sc)
			p.Legend.Add(c.name, l, sc)
		}
		path := filepath.Join(*out, "sim_"+which+".png")
		if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
			return err
		}
	}
	fmt.Fprintf(rep, "\nPlots: sim_s.png, sim_r.png. Simulation took %.0f s.\n\n", time.Since(t0).Seconds())
	return nil
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
