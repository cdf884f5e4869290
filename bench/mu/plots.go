package mu

import (
	"image/color"
	"os"

	"github.com/escra-dev/escra/bench/pema"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var colors = map[string]color.RGBA{
	"rps":         {0x1f, 0x77, 0xb4, 0xff},
	"concurrency": {0xff, 0x7f, 0x0e, 0xff},
	"mu_nopred":   {0x94, 0x67, 0xbd, 0xff},
	"mu":          {0xd6, 0x27, 0x28, 0xff},
	"mu_noadm":    {0x8c, 0x56, 0x4b, 0xff},
	"ideal":       {0x33, 0x33, 0x33, 0xff},
}

// plotPods is Fig 3: replicas ready per second per policy, and the ideal.
func plotPods(path, title string, s map[string]*series, order []string, ideal []int) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "replicas"
	add := func(name string, ys []int, dashed bool) error {
		pts := make(plotter.XYs, len(ys))
		for i, y := range ys {
			pts[i] = plotter.XY{X: float64(i), Y: float64(y)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = colors[name]
		l.Width = vg.Points(1.2)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	for _, n := range order {
		if x := s[n]; x != nil && len(x.Ready) > 0 {
			if err := add(n, x.Ready, false); err != nil {
				return err
			}
		}
	}
	if err := add("ideal", ideal, true); err != nil {
		return err
	}
	p.Legend.Top = true
	return p.Save(9*vg.Inch, 4*vg.Inch, path)
}

// plotCDF is Fig 8: the response-time CDF of each policy (503s excluded).
func plotCDF(path, title string, lat map[string][]float64, order []string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "response time (ms, log)"
	p.Y.Label.Text = "CDF"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	for _, n := range order {
		xs := lat[n]
		if len(xs) == 0 {
			continue
		}
		step := max(1, len(xs)/500)
		var pts plotter.XYs
		for i := 0; i < len(xs); i += step {
			pts = append(pts, plotter.XY{X: max(xs[i], 1), Y: float64(i+1) / float64(len(xs))})
		}
		pts = append(pts, plotter.XY{X: max(xs[len(xs)-1], 1), Y: 1})
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = colors[n]
		l.Width = vg.Points(1.4)
		p.Add(l)
		p.Legend.Add(n, l)
	}
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.XOffs = -vg.Points(5)
	_ = draw.PosRight
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

// svgPods is Fig. 3 as plain SVG (as the other benchmarks' figures under
// docs/): each policy's ready replicas per second and the ideal.
func svgPods(path, title string, s map[string]*series, order []string, ideal []int) error {
	line := func(name string, ys []int) pema.Series {
		x, y := make([]float64, len(ys)), make([]float64, len(ys))
		for i, v := range ys {
			x[i], y[i] = float64(i), float64(v)
		}
		return pema.Series{Name: name, X: x, Y: y}
	}
	var ls []pema.Series
	for _, n := range order {
		if x := s[n]; x != nil && len(x.Ready) > 0 {
			ls = append(ls, line(n, x.Ready))
		}
	}
	ls = append(ls, line("ideal", ideal))
	return os.WriteFile(path, []byte(pema.SVG(title, "time (s)", "ready replicas", ls, map[string]float64{})), 0o644)
}
