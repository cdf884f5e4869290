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
	"os"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

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
