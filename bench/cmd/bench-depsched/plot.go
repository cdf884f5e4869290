package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// A minimal SVG line/bar plotter: the figures of dependency-aware
// scheduling (Fig 3 CDFs, Fig 5 speedup curves, Fig 6 bars) without a plotting dependency.

var colours = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

type series struct {
	name string
	x, y []float64
}

const (
	pw, ph         = 560.0, 360.0
	ml, mr, mt, mb = 60.0, 150.0, 30.0, 45.0
)

func svgHead(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", pw, ph)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="18" font-size="14">%s</text>`+"\n", ml, esc(title))
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func axes(b *strings.Builder, xlab, ylab string, x0, x1, y0, y1 float64, logx, xticks bool) (fx, fy func(float64) float64) {
	w, h := pw-ml-mr, ph-mt-mb
	tx := func(v float64) float64 {
		if logx {
			v, x0, x1 := math.Log10(max(v, 1e-3)), math.Log10(max(x0, 1e-3)), math.Log10(max(x1, 1e-3))
			return ml + w*(v-x0)/max(x1-x0, 1e-9)
		}
		return ml + w*(v-x0)/max(x1-x0, 1e-9)
	}
	fy = func(v float64) float64 { return mt + h - h*(v-y0)/max(y1-y0, 1e-9) }
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", ml, mt+h, ml+w, mt+h)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", ml, mt, ml, mt+h)
	for i := 0; i <= 4; i++ {
		yv := y0 + (y1-y0)*float64(i)/4
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", ml-4, fy(yv)+4, num(yv))
		var xv float64
		if logx {
			xv = math.Pow(10, math.Log10(max(x0, 1e-3))+(math.Log10(max(x1, 1e-3))-math.Log10(max(x0, 1e-3)))*float64(i)/4)
		} else {
			xv = x0 + (x1-x0)*float64(i)/4
		}
		if xticks {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", tx(xv), mt+h+15, num(xv))
		}
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ml+w/2, ph-8, esc(xlab))
	fmt.Fprintf(b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", mt+h/2, esc(ylab))
	return tx, fy
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func legend(b *strings.Builder, names []string) {
	for i, n := range names {
		y := mt + 10 + float64(i)*18
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			pw-mr+10, y-10, colours[i%len(colours)], pw-mr+28, y, esc(n))
	}
}

// linePlot writes series as polylines.
func linePlot(path, title, xlab, ylab string, ss []series, logx bool) error {
	var b strings.Builder
	svgHead(&b, title)
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for _, s := range ss {
		for i := range s.x {
			x0, x1, y1 = min(x0, s.x[i]), max(x1, s.x[i]), max(y1, s.y[i])
		}
	}
	if math.IsInf(x0, 0) {
		return nil
	}
	if logx {
		x0 = max(x0, 0.01)
	}
	tx, ty := axes(&b, xlab, ylab, x0, x1, y0, y1*1.05, logx, true)
	var names []string
	for i, s := range ss {
		var pts []string
		for j := range s.x {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", tx(max(s.x[j], x0)), ty(s.y[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke-width="2" stroke="%s" points="%s"/>`+"\n", colours[i%len(colours)], strings.Join(pts, " "))
		names = append(names, s.name)
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return writeFile(path, b.String())
}

// barPlot writes groups of bars: groups along x, one bar per series.
func barPlot(path, title, ylab string, groups []string, ss []series) error {
	var b strings.Builder
	svgHead(&b, title)
	y1 := 0.0
	for _, s := range ss {
		for _, v := range s.y {
			y1 = max(y1, v)
		}
	}
	_, ty := axes(&b, "", ylab, 0, 1, 0, y1*1.1, false, false)
	w := (pw - ml - mr) / float64(len(groups))
	bw := w * 0.8 / float64(len(ss))
	var names []string
	for i, s := range ss {
		for g := range groups {
			x := ml + w*float64(g) + w*0.1 + bw*float64(i)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, ty(s.y[g]), bw, ty(0)-ty(s.y[g]), colours[i%len(colours)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`+"\n", x+bw/2, ty(s.y[g])-3, num(s.y[g]))
		}
		names = append(names, s.name)
	}
	for g, name := range groups {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="white" stroke="white" stroke-width="4">%s</text>`, ml+w*float64(g)+w/2, ph-mb+15, esc(name))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ml+w*float64(g)+w/2, ph-mb+15, esc(name))
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return writeFile(path, b.String())
}

// cdf turns sorted samples into at most 200 CDF points.
func cdf(name string, sorted []float64) series {
	s := series{name: name}
	n := len(sorted)
	if n == 0 {
		return s
	}
	step := max(n/200, 1)
	for i := 0; i < n; i += step {
		s.x = append(s.x, sorted[i])
		s.y = append(s.y, float64(i+1)/float64(n))
	}
	s.x = append(s.x, sorted[n-1])
	s.y = append(s.y, 1)
	return s
}

func writeFile(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
