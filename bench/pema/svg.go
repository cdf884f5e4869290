package pema

import (
	"fmt"
	"math"
	"strings"
)

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// SVG draws the series as a line chart with optional horizontal lines
// (the SLO); plain SVG, no dependency.
func SVG(title, xlabel, ylabel string, series []Series, hlines map[string]float64) string {
	const w, h, l, r, tp, bt = 720.0, 300.0, 60.0, 150.0, 30.0, 40.0
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for _, s := range series {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymax = math.Max(ymax, s.Y[i])
		}
	}
	for _, v := range hlines {
		ymax = math.Max(ymax, v)
	}
	if math.IsInf(xmin, 1) || xmax <= xmin {
		xmin, xmax = 0, 1
	}
	if !(ymax > ymin) {
		ymax = 1
	}
	ymax *= 1.05
	px := func(x float64) float64 { return l + (x-xmin)/(xmax-xmin)*(w-l-r) }
	py := func(y float64) float64 { return h - bt - (y-ymin)/(ymax-ymin)*(h-tp-bt) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="18" font-size="13">%s</text>`+"\n", l, esc(title))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n",
		l, h-bt, w-r, h-bt, l, tp, l, h-bt)
	for i := 0; i <= 4; i++ {
		y := ymin + (ymax-ymin)*float64(i)/4
		x := xmin + (xmax-xmin)*float64(i)/4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.3g</text>`, l-4, py(y)+4, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.3g</text>`+"\n", px(x), h-bt+14, x)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, (l+w-r)/2, h-6, esc(xlabel))
	fmt.Fprintf(&b, `<text x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`+"\n", (tp+h-bt)/2, (tp+h-bt)/2, esc(ylabel))
	k := 0
	for name, v := range hlines {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="gray" stroke-dasharray="4 3"/><text x="%.1f" y="%.1f" fill="gray">%s</text>`+"\n",
			l, py(v), w-r, py(v), w-r+4, py(v)+4+float64(k)*12, esc(name))
		k++
	}
	for i, s := range series {
		c := palette[i%len(palette)]
		var pts []string
		for j := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="3" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			w-r+4, tp+float64(i)*14+30, c, w-r+18, tp+float64(i)*14+34, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
