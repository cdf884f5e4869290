// Command bench-report turns a benchmark results JSON into report.md,
// summary.json and plots/*.png in -out.
//
//	bench-report -in results/bench/results.json -out results/bench
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/escra-dev/escra/bench/report"
)

func main() {
	in := flag.String("in", "results/bench/results.json", "results JSON written by the benchmark driver")
	out := flag.String("out", "results/bench", "directory for report.md, summary.json and plots/")
	flag.Parse()
	r, err := report.Load(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-report:", err)
		os.Exit(1)
	}
	if err := report.Generate(r, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-report:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench-report: wrote %s/report.md, %s/summary.json and %s/plots\n", *out, *out, *out)
}
