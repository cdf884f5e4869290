// Command dashboard-png draws a Grafana dashboard's panels from a real
// Prometheus: each panel's PromQL is evaluated over a time range through
// Prometheus's HTTP API (/api/v1/query_range; /api/v1/query for instant
// tables) and drawn with gonum/plot in the dashboard's own grid layout.
// It is not Grafana and does not imitate its look; it shows what the
// dashboard's queries return. Every query must return data: a target
// with no sample is reported and makes the command fail (-allow-empty
// draws anyway).
//
//	dashboard-png -prom http://127.0.0.1:9090 -dashboard packaging/grafana/escra-dashboard.json \
//	    -start 2026-01-01T10:00:00Z -end 2026-01-01T10:10:00Z -out docs/img/dashboard.png
//
// Template variables take their "All" value (allValue) unless -var
// NAME=VALUE says otherwise; $__rate_interval is Grafana's
// max(step + scrape interval, 4 × scrape interval).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sansFont is Liberation Sans (bundled with gonum/plot), for every text.
var sansFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

type dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			AllValue   string `json:"allValue"`
			IncludeAll bool   `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	RefID        string `json:"refId"`
	Instant      bool   `json:"instant"`
}

// series is one line of a panel: a legend and its points (NaN: a gap).
type series struct {
	legend string
	ts     []float64 // unix seconds
	vs     []float64
}

type varFlags map[string]string

func (v varFlags) String() string { return fmt.Sprint(map[string]string(v)) }
func (v varFlags) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	v[k] = val
	return nil
}

func main() {
	prom := flag.String("prom", "http://127.0.0.1:9090", "Prometheus base URL")
	dashPath := flag.String("dashboard", "packaging/grafana/escra-dashboard.json", "Grafana dashboard JSON")
	out := flag.String("out", "dashboard.png", "PNG to write")
	startS := flag.String("start", "", "range start, RFC 3339 (default: -end minus -range)")
	endS := flag.String("end", "", "range end, RFC 3339 (default: now)")
	rng := flag.Duration("range", 10*time.Minute, "range when -start is not given")
	scrape := flag.Duration("scrape", 5*time.Second, "Prometheus's scrape interval (for $__rate_interval)")
	widthPx := flag.Int("width", 1800, "image width in pixels (24 grid columns)")
	note := flag.String("note", "", "a line under the title saying where the data came from")
	allowEmpty := flag.Bool("allow-empty", false, "draw even when a query returns no data")
	vars := varFlags{}
	flag.Var(vars, "var", "NAME=VALUE for a template variable (repeatable)")
	flag.Parse()
	if err := run(*prom, *dashPath, *out, *startS, *endS, *rng, *scrape, *widthPx, *note, *allowEmpty, vars); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard-png:", err)
		os.Exit(1)
	}
}

func run(prom, dashPath, out, startS, endS string, rng, scrape time.Duration, widthPx int, note string, allowEmpty bool, vars varFlags) error {
	b, err := os.ReadFile(dashPath)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", dashPath, err)
	}
	end := time.Now()
	if endS != "" {
		if end, err = time.Parse(time.RFC3339, endS); err != nil {
			return err
		}
	}
	start := end.Add(-rng)
	if startS != "" {
		if start, err = time.Parse(time.RFC3339, startS); err != nil {
			return err
		}
	}
	if !start.Before(end) {
		return fmt.Errorf("start %v is not before end %v", start, end)
	}
	// Grafana's step: the range over about one point per two pixels of a
	// half-width panel, never below the scrape interval.
	step := max(scrape, (end.Sub(start) / 450).Round(time.Second))
	rateInterval := max(step+scrape, 4*scrape)
	values := map[string]string{
		"__rate_interval": promDuration(rateInterval),
		"__interval":      promDuration(step),
		"__range":         promDuration(end.Sub(start)),
	}
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		values[v.Name] = v.AllValue
		if v.AllValue == "" {
			values[v.Name] = ".*"
		}
	}
	for k, v := range vars {
		values[k] = v
	}
	c := &client{base: strings.TrimRight(prom, "/"), http: &http.Client{Timeout: 30 * time.Second}}

	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	// Grafana's grid: 24 columns, 30 px a row.
	const rowPx, headPx = 30, 78
	heightPx := headPx + rows*rowPx + 8
	px := func(n float64) vg.Length { return vg.Length(n) * vg.Inch / 96 }
	img := vgimg.NewWith(vgimg.UseWH(px(float64(widthPx)), px(float64(heightPx))), vgimg.UseDPI(96),
		vgimg.UseBackgroundColor(color.RGBA{0xf4, 0xf5, 0xf5, 0xff}))
	dc := draw.New(img)
	top := dc.Max.Y

	title := textStyle(17, true, color.Black)
	small := textStyle(11, false, color.RGBA{0x46, 0x4c, 0x54, 0xff})
	dc.FillText(title, vg.Point{X: px(10), Y: top - px(24)}, d.Title+" dashboard ("+dashPath+")")
	dc.FillText(small, vg.Point{X: px(10), Y: top - px(44)},
		fmt.Sprintf("Each panel's PromQL from the dashboard JSON, evaluated by a real Prometheus (%s) from %s to %s UTC, step %s, $__rate_interval %s, %s; drawn by scripts/dashboard-png with gonum/plot, not a Grafana screenshot.",
			prom, start.UTC().Format("2006-01-02 15:04:05"), end.UTC().Format("15:04:05"), step, promDuration(rateInterval), varsText(d, values)))
	if note != "" {
		dc.FillText(small, vg.Point{X: px(10), Y: top - px(62)}, note)
	}

	colPx := float64(widthPx-8) / 24
	var empty []string
	for _, p := range d.Panels {
		g := p.GridPos
		r := vg.Rectangle{
			Min: vg.Point{X: px(4 + float64(g.X)*colPx + 4), Y: top - px(float64(headPx+(g.Y+g.H)*rowPx))},
			Max: vg.Point{X: px(4 + float64(g.X+g.W)*colPx - 4), Y: top - px(float64(headPx+g.Y*rowPx+6))},
		}
		cv := draw.Canvas{Canvas: img, Rectangle: r}
		switch p.Type {
		case "row":
			cv.FillText(textStyle(14, true, color.RGBA{0x1f, 0x23, 0x28, 0xff}), vg.Point{X: r.Min.X + px(4), Y: r.Min.Y + px(4)}, p.Title)
			continue
		case "timeseries":
			var all []series
			for _, t := range p.Targets {
				expr := expand(t.Expr, values)
				ss, err := c.rangeQuery(expr, start, end, step)
				if err != nil {
					return fmt.Errorf("panel %q %s: %w", p.Title, t.RefID, err)
				}
				n := 0
				for i := range ss {
					ss[i].legend = legend(t.LegendFormat, ss[i].legend)
					for _, v := range ss[i].vs {
						if !math.IsNaN(v) {
							n++
						}
					}
				}
				fmt.Fprintf(os.Stderr, "dashboard-png: %-45q %s: %d series, %d samples: %s\n", p.Title, t.RefID, len(ss), n, expr)
				if n == 0 {
					empty = append(empty, fmt.Sprintf("%q %s: %s", p.Title, t.RefID, expr))
				}
				all = append(all, ss...)
			}
			if err := drawTimeseries(cv, p, all, start, end, step, px); err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
		case "table":
			var rowsT [][]string
			var header []string
			for _, t := range p.Targets {
				expr := expand(t.Expr, values)
				h, rs, err := c.instantTable(expr, end)
				if err != nil {
					return fmt.Errorf("panel %q %s: %w", p.Title, t.RefID, err)
				}
				fmt.Fprintf(os.Stderr, "dashboard-png: %-45q %s: %d rows: %s\n", p.Title, t.RefID, len(rs), expr)
				if len(rs) == 0 {
					empty = append(empty, fmt.Sprintf("%q %s: %s", p.Title, t.RefID, expr))
				}
				header, rowsT = h, append(rowsT, rs...)
			}
			drawTable(cv, p.Title, header, rowsT, px)
		default:
			return fmt.Errorf("panel %q: type %q is not drawn by this tool", p.Title, p.Type)
		}
	}
	if len(empty) > 0 && !allowEmpty {
		return fmt.Errorf("%d queries returned no data (a dashboard defect, or nothing ran):\n  %s", len(empty), strings.Join(empty, "\n  "))
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func varsText(d dashboard, values map[string]string) string {
	var parts []string
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		val := values[v.Name]
		if val == v.AllValue || (v.AllValue == "" && val == ".*") {
			val = "All"
		}
		parts = append(parts, "$"+v.Name+" = "+val)
	}
	return strings.Join(parts, ", ")
}

var varRE = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand substitutes Grafana's $name and ${name} variables.
func expand(expr string, values map[string]string) string {
	return varRE.ReplaceAllStringFunc(expr, func(m string) string {
		g := varRE.FindStringSubmatch(m)
		name := g[1] + g[2]
		if v, ok := values[name]; ok {
			return v
		}
		return m
	})
}

var legendRE = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend applies a legendFormat to a series' labels (passed as
// "name=value,..."); without a format, the labels themselves.
func legend(format, labels string) string {
	if format == "" {
		return "{" + labels + "}"
	}
	m := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return legendRE.ReplaceAllStringFunc(format, func(s string) string {
		return m[legendRE.FindStringSubmatch(s)[1]]
	})
}

func promDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
}

type client struct {
	base string
	http *http.Client
}

type promResp struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	ErrorType string `json:"errorType"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func (c *client) get(path string, q url.Values) (*promResp, error) {
	resp, err := c.http.Get(c.base + path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r promResp
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return &r, nil
}

func labelsText(m map[string]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func sample(p [2]any) (float64, float64, error) {
	t, ok := p[0].(float64)
	s, ok2 := p[1].(string)
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("bad sample %v", p)
	}
	v, err := strconv.ParseFloat(s, 64)
	return t, v, err
}

func (c *client) rangeQuery(expr string, start, end time.Time, step time.Duration) ([]series, error) {
	r, err := c.get("/api/v1/query_range", url.Values{
		"query": {expr},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
	if err != nil {
		return nil, err
	}
	var out []series
	for _, res := range r.Data.Result {
		s := series{legend: labelsText(res.Metric)}
		for _, p := range res.Values {
			t, v, err := sample(p)
			if err != nil {
				return nil, err
			}
			s.ts, s.vs = append(s.ts, t), append(s.vs, v)
		}
		out = append(out, s)
	}
	return out, nil
}

// instantTable is Grafana's table of an instant query: one column per
// label, then Value.
func (c *client) instantTable(expr string, at time.Time) ([]string, [][]string, error) {
	r, err := c.get("/api/v1/query", url.Values{"query": {expr}, "time": {strconv.FormatInt(at.Unix(), 10)}})
	if err != nil {
		return nil, nil, err
	}
	keys := map[string]bool{}
	for _, res := range r.Data.Result {
		for k := range res.Metric {
			keys[k] = true
		}
	}
	var header []string
	for k := range keys {
		header = append(header, k)
	}
	sort.Strings(header)
	var rows [][]string
	for _, res := range r.Data.Result {
		_, v, err := sample(res.Value)
		if err != nil {
			return nil, nil, err
		}
		var row []string
		for _, k := range header {
			row = append(row, res.Metric[k])
		}
		rows = append(rows, append(row, strconv.FormatFloat(v, 'g', -1, 64)))
	}
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i], " ") < strings.Join(rows[j], " ") })
	return append(header, "Value"), rows, nil
}

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

// unitTicks puts the y axis ticks at round numbers of the panel's
// Grafana unit (100 MiB, not 104.9 MB) and labels them in it.
func unitTicks(unit string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		scale, suffix := unitScale(unit, math.Max(math.Abs(lo), math.Abs(hi)))
		ts := plot.DefaultTicks{}.Ticks(lo/scale, hi/scale)
		for i := range ts {
			ts[i].Value *= scale
			if ts[i].Label != "" {
				ts[i].Label = strconv.FormatFloat(math.Round(ts[i].Value/scale*1000)/1000, 'f', -1, 64) + suffix
			}
		}
		return ts
	})
}

// unitScale is the divisor and suffix for a Grafana unit at magnitude m.
func unitScale(unit string, m float64) (float64, string) {
	switch unit {
	case "bytes":
		units := []string{" B", " KiB", " MiB", " GiB", " TiB"}
		i := 0
		for ; m >= 1024 && i < len(units)-1; m /= 1024 {
			i++
		}
		return math.Pow(1024, float64(i)), units[i]
	case "percentunit":
		return 0.01, "%"
	case "s":
		switch {
		case m < 1e-3:
			return 1e-6, " µs"
		case m < 1:
			return 1e-3, " ms"
		}
		return 1, " s"
	case "ops":
		return 1, " ops/s"
	}
	return 1, ""
}

// timeTicks marks round clock times, about six across the range.
type timeTicks struct{}

func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	steps := []float64{10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if (hi-lo)/s <= 7 {
			step = s
			break
		}
	}
	format := "15:04"
	if step < 60 {
		format = "15:04:05"
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		if v-lo < 0.04*(hi-lo) || hi-v < 0.02*(hi-lo) { // no label under the y axis's or past the end
			continue
		}
		ts = append(ts, plot.Tick{Value: v, Label: time.Unix(int64(v), 0).UTC().Format(format)})
	}
	return ts
}
