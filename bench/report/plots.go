package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// policyColor gives each policy the same, distinct colour in every plot.
func policyColor(p string) color.Color {
	palette := []color.RGBA{
		{0xd6, 0x27, 0x28, 0xff}, // escra: red
		{0x94, 0x67, 0xbd, 0xff}, // escra-kernel: purple
		{0x1f, 0x77, 0xb4, 0xff}, // static15: blue
		{0x17, 0xbe, 0xcf, 0xff}, // static10: cyan
		{0x7f, 0x7f, 0x7f, 0xff}, // static075: grey
		{0x2c, 0xa0, 0x2c, 0xff}, // autopilot: green
		{0xff, 0x7f, 0x0e, 0xff}, // vpa10: orange
		{0x8c, 0x56, 0x4b, 0xff}, // vpa60: brown
	}
	return palette[min(policyRank(p), 100)%len(palette)]
}

func zeroIfNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// PlotDeltas draws Escra Fig. 4 for one baseline: per cell, Δ p99.9
// latency (reduction) and Δ throughput (increase) of each Escra policy.
func PlotDeltas(ds []Delta, baseline, path string) error {
	var labels []string
	var lat, tput plotter.Values
	for _, d := range ds {
		if d.Baseline != baseline || !d.HasClient {
			continue
		}
		l := d.Workload + "/" + d.Load
		if d.Escra != "escra" {
			l += " (" + d.Escra + ")"
		}
		labels = append(labels, l)
		// No bar where the percentage is undefined (baseline figure zero).
		lat = append(lat, zeroIfNaN(d.P999Latency))
		tput = append(tput, zeroIfNaN(d.Throughput))
	}
	if len(labels) == 0 {
		return fmt.Errorf("no deltas against %s", baseline)
	}
	// Like Escra Fig. 4, cut very large changes off so the others stay
	// readable; the report's tables have the exact values.
	const clip = 300.0
	clipped := false
	for _, vs := range []plotter.Values{lat, tput} {
		for i, v := range vs {
			if v > clip || v < -clip {
				vs[i] = math.Max(-clip, math.Min(clip, v))
				clipped = true
			}
		}
	}
	p := plot.New()
	p.Title.Text = "Escra vs " + baseline + ": change in p99.9 latency and throughput"
	if clipped {
		p.Title.Text += fmt.Sprintf(" (bars cut at ±%.0f %%)", clip)
	}
	p.Y.Label.Text = "% (positive = Escra better)"
	w := vg.Points(12)
	b1, err := plotter.NewBarChart(lat, w)
	if err != nil {
		return err
	}
	b1.Color, b1.Offset = plotutil.Color(0), -w/2
	b2, err := plotter.NewBarChart(tput, w)
	if err != nil {
		return err
	}
	b2.Color, b2.Offset = plotutil.Color(1), w/2
	p.Add(b1, b2, plotter.NewGrid())
	p.Legend.Add("p99.9 latency reduction", b1)
	p.Legend.Add("throughput increase", b2)
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Min, p.X.Max = -0.7, float64(len(labels))-0.3
	// Head room so the legend does not cover the bars.
	hi, lo := 0.0, 0.0
	for i := range lat {
		hi, lo = max(hi, lat[i], tput[i]), min(lo, lat[i], tput[i])
	}
	p.Y.Min, p.Y.Max = lo-0.05*(hi-lo+1), hi+0.35*(hi-lo+1)
	width := max(16*vg.Centimeter, vg.Length(len(labels))*2.5*vg.Centimeter)
	return p.Save(width, 12*vg.Centimeter, path)
}

// cdfXYs is the empirical CDF of xs.
func cdfXYs(xs []float64) plotter.XYs {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pts := make(plotter.XYs, 0, len(s))
	for i, x := range s {
		// Collapse runs of equal x to the top of the step.
		if i+1 < len(s) && s[i+1] == x {
			continue
		}
		pts = append(pts, plotter.XY{X: x, Y: float64(i+1) / float64(len(s))})
	}
	return pts
}

// PlotCDF draws one slack CDF per policy for one cell (Escra Fig. 5, 6).
func PlotCDF(cell Cell, policies []string, samples map[string][]float64, xlabel, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s load: %s CDF", cell.Workload, cell.Load, xlabel)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of 100 ms samples"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	drawn := 0
	for _, pol := range policies {
		xs := samples[pol]
		if len(xs) == 0 {
			continue
		}
		l, err := plotter.NewLine(cdfXYs(xs))
		if err != nil {
			return err
		}
		l.Color = policyColor(pol)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(pol, l)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("no slack samples for %s/%s", cell.Workload, cell.Load)
	}
	p.Legend.Left, p.Legend.Top = false, false
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}

// PlotSeries draws limit vs usage of one container over one run, CPU above
// and memory below (Escra Fig. 2).
func PlotSeries(run Run, path string) error {
	if len(run.Series) == 0 {
		return fmt.Errorf("run %s/%s/%s has no series", run.Workload, run.Load, run.Policy)
	}
	mk := func(title, ylabel string, lim, use func(SeriesPoint) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.X.Label.Text = "time (s)"
		p.Add(plotter.NewGrid())
		var l, u plotter.XYs
		for _, s := range run.Series {
			t := float64(s.TMs) / 1000
			l = append(l, plotter.XY{X: t, Y: lim(s)})
			u = append(u, plotter.XY{X: t, Y: use(s)})
		}
		ll, err := plotter.NewLine(l)
		if err != nil {
			return nil, err
		}
		ll.Color, ll.Width = plotutil.Color(0), vg.Points(1.5)
		ul, err := plotter.NewLine(u)
		if err != nil {
			return nil, err
		}
		ul.Color, ul.Width = plotutil.Color(1), vg.Points(1)
		p.Add(ll, ul)
		p.Legend.Add("limit", ll)
		p.Legend.Add("usage", ul)
		p.Legend.Top = true
		p.Y.Min = 0
		return p, nil
	}
	name := run.SeriesContainer
	if name == "" {
		name = run.Workload
	}
	cpu, err := mk(fmt.Sprintf("%s under %s (%s load): CPU", name, run.Policy, run.Load), "cores",
		func(s SeriesPoint) float64 { return s.CPULimit }, func(s SeriesPoint) float64 { return s.CPUUsage })
	if err != nil {
		return err
	}
	mem, err := mk("memory", "MiB",
		func(s SeriesPoint) float64 { return s.MemLimitMiB }, func(s SeriesPoint) float64 { return s.MemUsageMiB })
	if err != nil {
		return err
	}
	const w, h = 18 * vg.Centimeter, 16 * vg.Centimeter
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadY: vg.Points(10), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	plots := [][]*plot.Plot{{cpu}, {mem}}
	canvases := plot.Align(plots, tiles, dc)
	cpu.Draw(canvases[0][0])
	mem.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotAll writes every plot into dir/plots and returns their paths
// relative to dir, grouped for the report.
type plotFiles struct {
	Deltas   map[string]string // baseline → file
	CPUCDF   map[Cell]string
	MemCDF   map[Cell]string
	Series   map[Key]string
	Frontier map[Cell]string
	Failures []string
}

func plotAll(r *Results, aggs map[Key]*Agg, ds []Delta, dir string) plotFiles {
	pf := plotFiles{Deltas: map[string]string{}, CPUCDF: map[Cell]string{}, MemCDF: map[Cell]string{}, Series: map[Key]string{}}
	pdir := filepath.Join(dir, "plots")
	os.MkdirAll(pdir, 0o755)
	fail := func(what string, err error) { pf.Failures = append(pf.Failures, what+": "+err.Error()) }
	pols := Policies(aggs)
	for _, b := range pols {
		if IsEscra(b) {
			continue
		}
		rel := "plots/fig4_vs_" + KeyName(b) + ".png"
		if err := PlotDeltas(ds, b, filepath.Join(dir, rel)); err == nil {
			pf.Deltas[b] = rel
		} else if len(ds) > 0 {
			fail(rel, err)
		}
	}
	for _, c := range Cells(aggs) {
		cpu, mem := map[string][]float64{}, map[string][]float64{}
		for _, p := range pols {
			if a := aggs[Key{c, p}]; a != nil {
				cpu[p], mem[p] = a.CPUSlack, a.MemSlack
			}
		}
		base := KeyName(c.Workload) + "_" + KeyName(c.Load)
		rel := "plots/fig5_cpu_slack_cdf_" + base + ".png"
		if err := PlotCDF(c, pols, cpu, "CPU slack (cores)", filepath.Join(dir, rel)); err == nil {
			pf.CPUCDF[c] = rel
		} else {
			fail(rel, err)
		}
		rel = "plots/fig6_mem_slack_cdf_" + base + ".png"
		if err := PlotCDF(c, pols, mem, "memory slack (MiB)", filepath.Join(dir, rel)); err == nil {
			pf.MemCDF[c] = rel
		} else {
			fail(rel, err)
		}
	}
	var ff []string
	pf.Frontier, ff = plotFrontiers(Frontiers(r, aggs), dir)
	pf.Failures = append(pf.Failures, ff...)
	for _, run := range r.Runs {
		k := Key{Cell{run.Workload, run.Load}, run.Policy}
		if _, done := pf.Series[k]; done || len(run.Series) == 0 {
			continue
		}
		rel := "plots/fig2_series_" + KeyName(run.Workload) + "_" + KeyName(run.Load) + "_" + KeyName(run.Policy) + ".png"
		if err := PlotSeries(run, filepath.Join(dir, rel)); err == nil {
			pf.Series[k] = rel
		} else {
			fail(rel, err)
		}
	}
	return pf
}
