package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// client asks a Prometheus server's HTTP API for range and instant
// queries.
type client struct {
	base string
	http *http.Client
}

// promResp is the API's answer to either kind of query.
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
