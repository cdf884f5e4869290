package load

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"
)

// RateCSV replays a per-second rate trace: Poisson arrivals at Rates[i]
// req/s during second i (a real trace, e.g. Azure Functions' per-minute
// counts replayed one minute per second as Mu §4 does, drops in as a
// CSV file). After the last second the rate is 0.
type RateCSV struct {
	Label string
	Rates []float64
	Seed  int64
}

func (r RateCSV) Name() string {
	if r.Label != "" {
		return r.Label
	}
	return "ratecsv"
}

func (r RateCSV) Rate(t time.Duration) float64 {
	i := int(t / time.Second)
	if i < 0 || i >= len(r.Rates) {
		return 0
	}
	return r.Rates[i]
}

func (r RateCSV) Schedule(d time.Duration) []time.Duration {
	return poisson(d, rand.New(rand.NewSource(r.Seed)), r.Rate)
}

// ReadRateCSV reads one rate per line (req/s, the last comma-separated
// field of each line, so "second,rate" works too); blank lines and lines
// starting with # are skipped, as is a header line that is not a number.
func ReadRateCSV(rd io.Reader) ([]float64, error) {
	var out []float64
	sc := bufio.NewScanner(rd)
	line, header := 0, false
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		f := s
		if i := strings.LastIndexByte(s, ','); i >= 0 {
			f = strings.TrimSpace(s[i+1:])
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			if len(out) == 0 && !header {
				header = true // one header line before the first rate
				continue
			}
			return nil, fmt.Errorf("line %d: %q is not a rate", line, f)
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("line %d: rate %v must be a finite number ≥ 0", line, v)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rates")
	}
	return out, nil
}

// LoadRateCSV reads a rate file.
func LoadRateCSV(path string, seed int64) (RateCSV, error) {
	f, err := os.Open(path)
	if err != nil {
		return RateCSV{}, err
	}
	defer f.Close()
	rates, err := ReadRateCSV(f)
	if err != nil {
		return RateCSV{}, fmt.Errorf("%s: %w", path, err)
	}
	return RateCSV{Label: "ratecsv", Rates: rates, Seed: seed}, nil
}

// WriteRateCSV writes "second,rate" lines with a header.
func WriteRateCSV(w io.Writer, rates []float64) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "second,rps")
	for i, r := range rates {
		fmt.Fprintf(bw, "%d,%.3f\n", i, r)
	}
	return bw.Flush()
}
