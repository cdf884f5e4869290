package main

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// dashboard is what this tool reads of a Grafana dashboard's JSON: its
// title, template variables and panels.
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
