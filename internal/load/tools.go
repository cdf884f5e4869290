package load

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkScript makes wrk print its own counters and exact percentiles
// (including p99.9, which --latency does not show) on one parseable line.
const wrkScript = `done = function(summary, latency, requests)
  io.write(string.format("ESCRA requests=%d duration_us=%d errors_connect=%d errors_read=%d errors_write=%d errors_status=%d errors_timeout=%d p50_us=%d p99_us=%d p999_us=%d mean_us=%.1f max_us=%d\n",
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout, latency:percentile(50), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max))
end
`

// WrkRun describes a wrk run (Debian's wrk 4.1, closed loop: each
// connection waits for its response, so it is the "independent client"
// view, not an open-loop latency measurement).
type WrkRun struct {
	URL      string
	Threads  int // 1 when zero
	Conns    int // 4 when zero
	Duration time.Duration
	Header   []string // e.g. "Accept-Encoding: gzip"
	Timeout  time.Duration
}

// RunWrk runs wrk and parses its output.
func RunWrk(ctx context.Context, w WrkRun) (Result, error) {
	if err := CheckLoopback(w.URL); err != nil {
		return Result{}, err
	}
	f, err := os.CreateTemp("", "escra-wrk-*.lua")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(wrkScript); err != nil {
		f.Close()
		return Result{}, err
	}
	f.Close()
	threads, conns := max(w.Threads, 1), w.Conns
	if conns <= 0 {
		conns = 4
	}
	conns = max(conns, threads)
	args := []string{"-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", fmt.Sprintf("%ds", max(1, int(w.Duration.Seconds()))), "-s", f.Name()}
	if w.Timeout > 0 {
		args = append(args, "--timeout", fmt.Sprintf("%ds", max(1, int(w.Timeout.Seconds()))))
	}
	for _, h := range w.Header {
		args = append(args, "-H", h)
	}
	args = append(args, w.URL)
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return Result{}, fmt.Errorf("wrk: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ParseWrk(string(out))
}

var wrkKV = regexp.MustCompile(`([a-z0-9_]+)=([0-9.]+)`)

// ParseWrk reads the line printed by wrkScript.
func ParseWrk(out string) (Result, error) {
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "ESCRA ") {
			continue
		}
		kv := map[string]float64{}
		for _, m := range wrkKV.FindAllStringSubmatch(line, -1) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return Result{}, fmt.Errorf("wrk output: %s=%q: %v", m[1], m[2], err)
			}
			kv[m[1]] = v
		}
		for _, k := range []string{"requests", "duration_us", "p50_us", "p99_us", "p999_us"} {
			if _, ok := kv[k]; !ok {
				return Result{}, fmt.Errorf("wrk output lacks %s: %q", k, line)
			}
		}
		// wrk's summary.requests counts completed responses; status and
		// timeout errors are among them, connect/read/write are not.
		errs := kv["errors_status"] + kv["errors_timeout"]
		r := Result{Tool: "wrk", Shape: "closed",
			Requests: int64(kv["requests"]), DurationS: kv["duration_us"] / 1e6,
			MeanUs: kv["mean_us"], P50Us: kv["p50_us"], P99Us: kv["p99_us"], P999Us: kv["p999_us"], MaxUs: kv["max_us"]}
		r.Successes = max(0, r.Requests-int64(errs))
		if r.DurationS > 0 {
			r.ThroughputRPS = float64(r.Successes) / r.DurationS
		}
		return r, nil
	}
	return Result{}, fmt.Errorf("wrk output has no result line (was the Lua done() hook run?)")
}

// RedisRun describes a redis-benchmark run (closed loop, Clients
// connections each with one request in flight times Pipeline).
type RedisRun struct {
	Host     string // 127.0.0.1 when empty
	Port     int
	Clients  int // 10 when zero
	Requests int // 100000 when zero
	Tests    []string
	Pipeline int
	DataSize int // bytes of SET/GET values; 3 when zero
}

// RunRedisBenchmark runs redis-benchmark and returns one Result per test.
func RunRedisBenchmark(ctx context.Context, r RedisRun) ([]Result, error) {
	host := r.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if err := CheckLoopback("redis://" + host); err != nil {
		return nil, err
	}
	args := []string{"-h", host, "-p", strconv.Itoa(r.Port),
		"-c", strconv.Itoa(orDefault(r.Clients, 10)), "-n", strconv.Itoa(orDefault(r.Requests, 100000))}
	if len(r.Tests) > 0 {
		args = append(args, "-t", strings.Join(r.Tests, ","))
	}
	if r.Pipeline > 1 {
		args = append(args, "-P", strconv.Itoa(r.Pipeline))
	}
	if r.DataSize > 0 {
		args = append(args, "-d", strconv.Itoa(r.DataSize))
	}
	out, err := exec.CommandContext(ctx, "redis-benchmark", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ParseRedisBenchmark(string(out))
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

var (
	rbHeader  = regexp.MustCompile(`^====== (.+) ======$`)
	rbDone    = regexp.MustCompile(`^\s*(\d+) requests completed in ([0-9.]+) seconds`)
	rbPct     = regexp.MustCompile(`^([0-9.]+)% <= ([0-9.]+) milliseconds`)
	rbTput    = regexp.MustCompile(`throughput summary: ([0-9.]+) requests per second`)
	rbSummary = regexp.MustCompile(`^\s*([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)
)

// ParseRedisBenchmark reads redis-benchmark 7's default (non-CSV) output:
// per test a header, "N requests completed in S seconds", the "Latency by
// percentile distribution" (for p99.9, the first line at ≥ 99.9 %), and the
// summary (throughput; avg min p50 p95 p99 max in ms). Progress lines end
// in '\r' and are dropped.
func ParseRedisBenchmark(out string) ([]Result, error) {
	var res []Result
	var cur *Result
	inPct := false
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(out, "\r", "\n")))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " ")
		if m := rbHeader.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			res = append(res, Result{Tool: "redis-benchmark", Shape: "closed", Test: m[1]})
			cur = &res[len(res)-1]
			inPct = false
			continue
		}
		if cur == nil {
			continue
		}
		switch {
		case rbDone.MatchString(line):
			m := rbDone.FindStringSubmatch(line)
			cur.Requests, _ = strconv.ParseInt(m[1], 10, 64)
			cur.Successes = cur.Requests
			cur.DurationS, _ = strconv.ParseFloat(m[2], 64)
		case strings.HasPrefix(line, "Latency by percentile distribution"):
			inPct = true
		case strings.HasPrefix(line, "Cumulative distribution"):
			inPct = false
		case inPct && rbPct.MatchString(line):
			m := rbPct.FindStringSubmatch(line)
			p, _ := strconv.ParseFloat(m[1], 64)
			ms, _ := strconv.ParseFloat(m[2], 64)
			if p >= 99.9 && cur.P999Us == 0 {
				cur.P999Us = ms * 1000
			}
		case rbTput.MatchString(line):
			cur.ThroughputRPS, _ = strconv.ParseFloat(rbTput.FindStringSubmatch(line)[1], 64)
		case rbSummary.MatchString(line):
			m := rbSummary.FindStringSubmatch(line)
			f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v * 1000 }
			cur.MeanUs, cur.P50Us, cur.P99Us, cur.MaxUs = f(1), f(3), f(5), f(6)
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("redis-benchmark output has no test section")
	}
	for i := range res {
		r := &res[i]
		if r.Requests == 0 || r.ThroughputRPS == 0 || r.P50Us == 0 {
			return nil, fmt.Errorf("redis-benchmark output for %s is incomplete (requests %d, rps %v, p50 %v)",
				r.Test, r.Requests, r.ThroughputRPS, r.P50Us)
		}
		if r.P999Us == 0 {
			// Short runs may skip the 99.9 % line; the max is the honest bound.
			r.P999Us = r.MaxUs
		}
	}
	return res, nil
}
