package main

import (
	"image/color"
	"math"
	"sort"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// sansFont is Liberation Sans (bundled with gonum/plot), for every text.
var sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

func textStyle(size float64, bold bool, c color.Color) draw.TextStyle {
	f := sansFont
	if bold {
		f.Weight = xfont.WeightBold
	}
	return draw.TextStyle{Color: c, Font: font.From(f, vg.Length(size)*72/96), Handler: plot.DefaultTextHandler,
		XAlign: draw.XLeft, YAlign: draw.YBottom}
}

// Grafana's classic palette, in its order.
var palette = []color.RGBA{
	{0x7e, 0xb2, 0x6d, 0xff}, {0xea, 0xb8, 0x39, 0xff}, {0x6e, 0xd0, 0xe0, 0xff}, {0xef, 0x84, 0x3c, 0xff},
	{0xe2, 0x4d, 0x42, 0xff}, {0x1f, 0x78, 0xc1, 0xff}, {0xba, 0x43, 0xa9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
	{0x50, 0x86, 0x42, 0xff}, {0xcc, 0xa3, 0x00, 0xff}, {0x44, 0x7e, 0xbc, 0xff}, {0xc1, 0x5c, 0x17, 0xff},
}

func panelChrome(cv draw.Canvas, title string, px func(float64) vg.Length) vg.Rectangle {
	r := cv.Rectangle
	box := []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
	cv.FillPolygon(color.White, box)
	cv.StrokeLines(draw.LineStyle{Color: color.RGBA{0xd8, 0xd9, 0xda, 0xff}, Width: px(1)}, append(box, r.Min))
	cv.FillText(textStyle(13, true, color.RGBA{0x1f, 0x23, 0x28, 0xff}), vg.Point{X: r.Min.X + px(8), Y: r.Max.Y - px(20)}, title)
	return vg.Rectangle{Min: vg.Point{X: r.Min.X + px(4), Y: r.Min.Y + px(4)}, Max: vg.Point{X: r.Max.X - px(8), Y: r.Max.Y - px(26)}}
}

func drawTimeseries(cv draw.Canvas, p panel, all []series, start, end time.Time, step time.Duration, px func(float64) vg.Length) error {
	inner := panelChrome(cv, p.Title, px)
	sort.SliceStable(all, func(i, j int) bool { return all[i].legend < all[j].legend })
	// The legend under the plot, as Grafana's "list" at the bottom: flowed
	// left to right, wrapped.
	lsty := textStyle(11, false, color.RGBA{0x1f, 0x23, 0x28, 0xff})
	type item struct {
		x, y vg.Length
		s    string
		c    color.Color
	}
	var items []item
	x, y, lineH := inner.Min.X+px(6), vg.Length(0), px(16)
	for i, s := range all {
		w := px(22) + lsty.Width(s.legend) + px(14)
		if x+w > inner.Max.X && x > inner.Min.X+px(6) {
			x, y = inner.Min.X+px(6), y+lineH
		}
		items = append(items, item{x, y, s.legend, palette[i%len(palette)]})
		x += w
	}
	legendH := y + lineH + px(4)
	if len(all) == 0 {
		legendH = 0
	}
	for _, it := range items {
		yy := inner.Min.Y + legendH - it.y - lineH + px(2)
		cv.StrokeLine2(draw.LineStyle{Color: it.c, Width: px(3)}, it.x, yy+px(5), it.x+px(16), yy+px(5))
		cv.FillText(lsty, vg.Point{X: it.x + px(22), Y: yy}, it.s)
	}

	pl := plot.New()
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label.Font = sansFont
	}
	pl.X.Min, pl.X.Max = float64(start.Unix()), float64(end.Unix())
	pl.X.Tick.Marker = timeTicks{}
	pl.Y.Tick.Marker = unitTicks(p.FieldConfig.Defaults.Unit)
	// Tick labels without axis lines or tick marks, over a light grid.
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Tick.Label.Font.Size = px(11)
		a.Tick.Label.Color = color.RGBA{0x46, 0x4c, 0x54, 0xff}
		a.LineStyle.Width, a.Tick.LineStyle.Width, a.Tick.Length = 0, 0, 0
		a.Padding = px(4)
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.RGBA{0xe9, 0xed, 0xf2, 0xff}, color.RGBA{0xe9, 0xed, 0xf2, 0xff}
	pl.Add(grid)
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range all {
		// Break the line where a sample is missing or NaN.
		var seg plotter.XYs
		flush := func() error {
			if len(seg) == 0 {
				return nil
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color, l.Width = palette[i%len(palette)], px(1.5)
			pl.Add(l)
			if len(seg) == 1 {
				sc, err := plotter.NewScatter(seg)
				if err != nil {
					return err
				}
				sc.Color, sc.Radius, sc.Shape = palette[i%len(palette)], px(2), draw.CircleGlyph{}
				pl.Add(sc)
			}
			seg = nil
			return nil
		}
		for j := range s.ts {
			v := s.vs[j]
			if math.IsNaN(v) || math.IsInf(v, 0) || (len(seg) > 0 && s.ts[j]-seg[len(seg)-1].X > 1.5*step.Seconds()) {
				if err := flush(); err != nil {
					return err
				}
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue
				}
			}
			seg = append(seg, plotter.XY{X: s.ts[j], Y: v})
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if err := flush(); err != nil {
			return err
		}
	}
	if math.IsInf(lo, 1) { // no data: Grafana says so
		cv.FillText(textStyle(13, false, color.RGBA{0x8e, 0x8e, 0x8e, 0xff}), vg.Point{X: (inner.Min.X + inner.Max.X) / 2, Y: (inner.Min.Y + inner.Max.Y) / 2}, "No data")
		return nil
	}
	pl.Y.Min, pl.Y.Max = math.Min(0, lo), hi*1.08
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
	area := draw.Canvas{Canvas: cv.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: inner.Min.X, Y: inner.Min.Y + legendH}, Max: inner.Max}}
	pl.Draw(area)
	return nil
}

func drawTable(cv draw.Canvas, title string, header []string, rows [][]string, px func(float64) vg.Length) {
	inner := panelChrome(cv, title, px)
	hsty := textStyle(12, true, color.RGBA{0x1f, 0x23, 0x28, 0xff})
	sty := textStyle(12, false, color.RGBA{0x1f, 0x23, 0x28, 0xff})
	widths := make([]vg.Length, len(header))
	for i, h := range header {
		widths[i] = hsty.Width(h)
		for _, r := range rows {
			widths[i] = max(widths[i], sty.Width(r[i]))
		}
	}
	y := inner.Max.Y - px(22)
	drawRow := func(cells []string, s draw.TextStyle) {
		x := inner.Min.X + px(6)
		for i, c := range cells {
			cv.FillText(s, vg.Point{X: x, Y: y}, c)
			x += widths[i] + px(24)
		}
		cv.StrokeLine2(draw.LineStyle{Color: color.RGBA{0xe9, 0xed, 0xf2, 0xff}, Width: px(1)}, inner.Min.X, y-px(6), inner.Max.X, y-px(6))
		y -= px(24)
	}
	drawRow(header, hsty)
	for _, r := range rows {
		drawRow(r, sty)
	}
}
