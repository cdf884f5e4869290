package mu

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// AzureTrace is a file of per-function, per-minute invocation counts in
// the Azure Functions 2019 dataset's format (Shahrad et al., "Serverless
// in the Wild", ATC 2020): a header naming HashFunction and one column per
// minute ("1".."1440" upstream, "minute_1".. in samples drawn from it),
// then one row per function. Rows are numbered from 1 (file line − 1);
// hashes are only labels, so a function is picked by row.
type AzureTrace struct {
	File string
	Fns  []AzureFunction
}

// AzureFunction is one row.
type AzureFunction struct {
	Row    int
	Hash   string
	Counts []float64 // invocations in each minute
}

// Total is the function's invocations over the file.
func (f AzureFunction) Total() float64 {
	var s float64
	for _, c := range f.Counts {
		s += c
	}
	return s
}

// Peak is its highest per-minute count.
func (f AzureFunction) Peak() float64 {
	var m float64
	for _, c := range f.Counts {
		m = math.Max(m, c)
	}
	return m
}

// ReadAzureTrace reads a trace file; any bad row is an error naming the
// file and line.
func ReadAzureTrace(path string) (*AzureTrace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseAzureTrace(path, f)
}

func parseAzureTrace(name string, rd io.Reader) (*AzureTrace, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	bad := func(line int, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, a...))
	}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, fmt.Errorf("%s: empty file (want a header HashFunction,...,minute columns)", name)
	}
	header := strings.Split(strings.TrimRight(sc.Text(), "\r"), ",")
	hashCol, minCols := -1, []int(nil)
	for i, h := range header {
		h = strings.TrimSpace(h)
		if h == "HashFunction" {
			hashCol = i
			continue
		}
		n := strings.TrimPrefix(h, "minute_")
		if k, err := strconv.Atoi(n); err == nil && k == len(minCols)+1 {
			minCols = append(minCols, i)
		}
	}
	if hashCol < 0 || len(minCols) == 0 {
		return nil, bad(1, "header has no HashFunction column or no minute columns (1.. or minute_1..)")
	}
	t := &AzureTrace{File: name}
	line := 1
	for sc.Scan() {
		line++
		s := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		cols := strings.Split(s, ",")
		if len(cols) != len(header) {
			return nil, bad(line, "%d columns, the header has %d", len(cols), len(header))
		}
		fn := AzureFunction{Row: len(t.Fns) + 1, Hash: strings.TrimSpace(cols[hashCol]), Counts: make([]float64, len(minCols))}
		if fn.Hash == "" {
			return nil, bad(line, "empty HashFunction")
		}
		for j, c := range minCols {
			v, err := strconv.ParseFloat(strings.TrimSpace(cols[c]), 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, bad(line, "column %s: %q is not a non-negative count", header[c], cols[c])
			}
			fn.Counts[j] = v
		}
		t.Fns = append(t.Fns, fn)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if len(t.Fns) == 0 {
		return nil, fmt.Errorf("%s: no function rows", name)
	}
	return t, nil
}

// Pick finds a function by row number (1..) or by hash; a hash that
// several rows carry picks the first, and the note says so.
func (t *AzureTrace) Pick(sel string) (AzureFunction, string, error) {
	sel = strings.TrimSpace(sel)
	if n, err := strconv.Atoi(sel); err == nil {
		if n < 1 || n > len(t.Fns) {
			return AzureFunction{}, "", fmt.Errorf("%s: row %d: the file has rows 1..%d", t.File, n, len(t.Fns))
		}
		return t.Fns[n-1], fmt.Sprintf("row %d", n), nil
	}
	var rows []int
	for _, f := range t.Fns {
		if strings.EqualFold(f.Hash, sel) || (len(sel) >= 8 && strings.HasPrefix(strings.ToLower(f.Hash), strings.ToLower(sel))) {
			rows = append(rows, f.Row)
		}
	}
	switch len(rows) {
	case 0:
		return AzureFunction{}, "", fmt.Errorf("%s: no function with hash %q (give a row number 1..%d or a hash of at least 8 hex digits)", t.File, sel, len(t.Fns))
	case 1:
		return t.Fns[rows[0]-1], fmt.Sprintf("hash %s = row %d", sel, rows[0]), nil
	}
	return t.Fns[rows[0]-1], fmt.Sprintf("hash %s is on %d rows (%v); the first, row %d, is used (pick by row to choose another)", sel, len(rows), rows, rows[0]), nil
}

// Segment is a piece of one function's trace made into a per-second rate
// trace: Minutes minutes from Start (0-based), each lasting MinuteAs
// seconds, counts multiplied by Scale. Every step is kept for the report.
type Segment struct {
	Row           int
	Hash          string
	Start         int     // first minute (0-based)
	Minutes       int     // minutes replayed
	MinuteAs      int     // seconds one trace minute lasts
	RawMean       float64 // invocations per minute over the segment
	RawPeak       float64
	Scale         float64 // applied to the counts
	ScaleFit      bool    // Scale was chosen to fit the machine (not given)
	ScaleWhy      string  // where a given scale comes from, for Describe
	ByRule        bool    // Start chosen by WindowRule (not given)
	WindowSD      float64 // standard deviation of the window's per-minute counts
	Rates         []float64
	MeanRPS, Peak float64 // of Rates
}

// SegmentOf cuts n seconds of f's trace. start < 0 picks the window by
// WindowRule (MostVariedWindow). scale ≤ 0 fits the segment's peak to
// fitPeak req/s.
func SegmentOf(f AzureFunction, seconds, minuteAs, start int, scale, fitPeak float64) (Segment, error) {
	if minuteAs < 1 {
		return Segment{}, fmt.Errorf("minute-as %d s: want at least 1 s", minuteAs)
	}
	mins := max(1, (seconds+minuteAs-1)/minuteAs)
	if mins > len(f.Counts) {
		mins = len(f.Counts)
	}
	if start >= 0 && start+mins > len(f.Counts) {
		return Segment{}, fmt.Errorf("row %d: minutes %d..%d are past the trace's %d minutes", f.Row, start+1, start+mins, len(f.Counts))
	}
	byRule := start < 0
	if byRule {
		start, _ = MostVariedWindow(f.Counts, mins)
	}
	s := Segment{Row: f.Row, Hash: f.Hash, Start: start, Minutes: mins, MinuteAs: minuteAs, Scale: scale, ByRule: byRule}
	raw := f.Counts[start : start+mins]
	s.RawMean, _, s.RawPeak = Stats(raw)
	for _, c := range raw {
		s.WindowSD += (c - s.RawMean) * (c - s.RawMean)
	}
	s.WindowSD = math.Sqrt(s.WindowSD / float64(mins))
	if s.RawPeak <= 0 {
		return s, fmt.Errorf("row %d: no invocations in minutes %d..%d", f.Row, start+1, start+mins)
	}
	// A minute's count spread over MinuteAs seconds is count/MinuteAs req/s.
	if scale <= 0 {
		s.Scale, s.ScaleFit = fitPeak*float64(minuteAs)/s.RawPeak, true
	}
	for _, c := range raw {
		for range minuteAs {
			s.Rates = append(s.Rates, c*s.Scale/float64(minuteAs))
		}
	}
	s.Rates = s.Rates[:min(len(s.Rates), max(seconds, minuteAs))]
	s.MeanRPS, _, s.Peak = Stats(s.Rates)
	return s, nil
}

// Describe is the segment's one-line account of every step.
func (s Segment) Describe() string {
	how := "given"
	if s.ScaleWhy != "" {
		how = s.ScaleWhy
	}
	if s.ScaleFit {
		how = "fitted to the machine"
	}
	win := "given"
	if s.ByRule {
		win = WindowRule
	}
	return fmt.Sprintf("row %d (hash %.8s), minutes %d..%d (%s; %d min, mean %.1f, sd %.1f, peak %.0f invocations/min), each minute as %d s, counts × %.4g (%s) → mean %.1f, peak %.1f req/s over %d s",
		s.Row, s.Hash, s.Start+1, s.Start+s.Minutes, win, s.Minutes, s.RawMean, s.WindowSD, s.RawPeak, s.MinuteAs, s.Scale, how, s.MeanRPS, s.Peak, len(s.Rates))
}

// Put stores the segment's steps in summary.json under prefix.
func (s Segment) Put(sum map[string]float64, prefix string) {
	sum[prefix+"_row"] = float64(s.Row)
	sum[prefix+"_start_minute"] = float64(s.Start + 1)
	sum[prefix+"_minutes"] = float64(s.Minutes)
	sum[prefix+"_minute_as_s"] = float64(s.MinuteAs)
	sum[prefix+"_raw_mean_per_min"] = s.RawMean
	sum[prefix+"_raw_peak_per_min"] = s.RawPeak
	sum[prefix+"_raw_sd_per_min"] = s.WindowSD
	sum[prefix+"_window_by_rule"] = b2f(s.ByRule)
	sum[prefix+"_scale"] = s.Scale
	sum[prefix+"_scale_fitted"] = b2f(s.ScaleFit)
	sum[prefix+"_mean_rps"] = s.MeanRPS
	sum[prefix+"_peak_rps"] = s.Peak
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TopByPeak is the rows of the n functions with the highest per-minute
// peak, highest first (ties by row).
func (t *AzureTrace) TopByPeak(n int) []AzureFunction {
	fs := append([]AzureFunction(nil), t.Fns...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Peak() > fs[j].Peak() })
	return fs[:min(n, len(fs))]
}

// CV is the coefficient of variation of the per-minute counts.
func (f AzureFunction) CV() float64 {
	m, _, _ := Stats(f.Counts)
	if m == 0 {
		return 0
	}
	var v float64
	for _, c := range f.Counts {
		v += (c - m) * (c - m)
	}
	return math.Sqrt(v/float64(len(f.Counts))) / m
}
