package report

import (
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotFrontier draws one cell's frontier as SVG: p99.9 (ms, with its
// 95 % interval) against reserved cores, static and Escra.
func PlotFrontier(f Frontier, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s load: p99.9 latency vs reserved CPU", f.Workload, f.Load)
	p.X.Label.Text = "reserved cores"
	p.Y.Label.Text = "p99.9 latency (ms)"
	for _, c := range []struct {
		name string
		pts  []FrontierPoint
	}{{"static at k × the 1 s peak", f.Static}, {"Escra at the same totals", f.Escra}} {
		xys := make(plotter.XYs, len(c.pts))
		errs := make(plotter.YErrors, len(c.pts))
		for i, pt := range c.pts {
			xys[i].X, xys[i].Y = pt.ReservedCores, pt.P999Us/1000
			errs[i].Low, errs[i].High = (pt.P999Us-pt.Lo)/1000, (pt.Hi-pt.P999Us)/1000
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		col := policyColor("static15")
		if c.pts[0].Policy != "" && IsEscra(c.pts[0].Policy) {
			col = policyColor("escra")
		}
		line.Color, points.Color = col, col
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errs})
		if err != nil {
			return err
		}
		bars.Color = col
		p.Add(line, points, bars)
		p.Legend.Add(c.name, line, points)
	}
	if r := f.BudgetRatioAtStatic15(); !math.IsNaN(r) {
		p.Title.Text += fmt.Sprintf(" (Escra reaches static15's p99.9 at %.2f × its cores)", r)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Y.Min = 0
	return p.Save(16*vg.Centimeter, 11*vg.Centimeter, path)
}

// writeFrontier is the report's frontier section: per offset cell, the
// two curves as a table, the budget ratio and the plot.
func writeFrontier(w func(string, ...any), fs []Frontier, plots map[Cell]string) {
	if len(fs) == 0 {
		return
	}
	w("## The latency–reservation frontier (cells whose containers peak apart)\n\n")
	w("Static at k × each container's 1 s peak (k = 0.5, 0.75, 1, 1.5; the quick matrix runs k = 1.5 for static, 1 and 1.5 for Escra) against Escra with exactly the same app budget (Escra §VI-C: the claim is a better frontier, not a win where nothing binds). ")
	w("p99.9 is the mean over repetitions with its 95 %% interval; the budget ratio is where Escra's curve through the upper ends of its intervals (the end worse for Escra) falls to static15's mean p99.9, linearly between points.\n\n")
	for _, f := range fs {
		w("### %s, %s load\n\n| k | static reserved cores | static p99.9 ms | Escra reserved cores | Escra p99.9 ms |\n|---|---|---|---|---|\n", f.Workload, f.Load)
		byK := map[float64][2]*FrontierPoint{}
		var ks []float64
		for i := range f.Static {
			v := byK[f.Static[i].K]
			if v[0] == nil && v[1] == nil {
				ks = append(ks, f.Static[i].K)
			}
			v[0] = &f.Static[i]
			byK[f.Static[i].K] = v
		}
		for i := range f.Escra {
			v := byK[f.Escra[i].K]
			if v[0] == nil && v[1] == nil {
				ks = append(ks, f.Escra[i].K)
			}
			v[1] = &f.Escra[i]
			byK[f.Escra[i].K] = v
		}
		cell := func(p *FrontierPoint) string {
			if p == nil {
				return "– | –"
			}
			return fmt.Sprintf("%.3f | %.1f [%.1f, %.1f]", p.ReservedCores, p.P999Us/1000, p.Lo/1000, p.Hi/1000)
		}
		for _, k := range ks {
			w("| %g | %s | %s |\n", k, cell(byK[k][0]), cell(byK[k][1]))
		}
		if r := f.BudgetRatioAtStatic15(); math.IsNaN(r) {
			w("\nEscra's curve does not reach static15's p99.9 within the budgets run.\n\n")
		} else {
			w("\nEscra reaches static15's p99.9 with **%.2f ×** static15's reserved cores.\n\n", r)
		}
		if f.OracleShare > 0 {
			w("An oracle that knew every period's demand and moved the budget between the containers would serve each as static15 does with %.2f × static15's reserved cores (bench/replay, on this run's profile): below that share only serving a container faster than static15 does can help.\n\n", f.OracleShare)
		}
		if p, ok := plots[f.Cell]; ok {
			w("![frontier of %s/%s](%s)\n\n", f.Workload, f.Load, p)
		}
	}
}

// plotFrontiers draws every frontier under dir/plots; it returns the
// files by cell and the failures.
func plotFrontiers(fs []Frontier, dir string) (map[Cell]string, []string) {
	out := map[Cell]string{}
	var fails []string
	for _, f := range fs {
		rel := "plots/frontier_" + KeyName(f.Workload) + "_" + KeyName(f.Load) + ".svg"
		if err := PlotFrontier(f, filepath.Join(dir, rel)); err != nil {
			fails = append(fails, rel+": "+err.Error())
			continue
		}
		out[f.Cell] = rel
	}
	return out, fails
}
