package load

import (
	"os"
	"testing"
)

// The parsers read other programs' output: whatever it is, they return a
// result or an error, never panic.
func FuzzParseWrk(f *testing.F) {
	if b, err := os.ReadFile("testdata/wrk.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("ESCRA requests=1 duration_us=0 p50_us=1 p99_us=1 p999_us=1")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseWrk(s)
		if err == nil && r.Successes > r.Requests {
			t.Errorf("more successes than requests: %+v", r)
		}
	})
}

func FuzzParseRedisBenchmark(f *testing.F) {
	if b, err := os.ReadFile("testdata/redis-benchmark.txt"); err == nil {
		f.Add(string(b))
	}
	f.Add("====== SET ======\n  1 requests completed in 0.00 seconds\n")
	f.Fuzz(func(t *testing.T, s string) {
		ParseRedisBenchmark(s)
	})
}
