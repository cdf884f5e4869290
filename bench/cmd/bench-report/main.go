// Command bench-report turns a benchmark results JSON into report.md,
// summary.json and plots/*.png in -out. Several results files, comma
// separated, are pooled into one report (report.Pool).
//
//	bench-report -in results/bench/results.json -out results/bench
//	bench-report -in runP/results.json,runQ/results.json -out pooled
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/escra-dev/escra/bench/report"
)

func main() {
	in := flag.String("in", "results/bench/results.json", "results JSON written by the benchmark driver; a comma list pools several runs")
	out := flag.String("out", "results/bench", "directory for report.md, summary.json and plots/")
	flag.Parse()
	var rs []*report.Results
	for _, p := range strings.Split(*in, ",") {
		r, err := report.Load(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-report:", err)
			os.Exit(1)
		}
		rs = append(rs, r)
	}
	r := rs[0]
	if len(rs) > 1 {
		var err error
		if r, err = report.Pool(rs); err != nil {
			fmt.Fprintln(os.Stderr, "bench-report:", err)
			os.Exit(1)
		}
	}
	if err := report.Generate(r, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench-report:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "bench-report: wrote %s/report.md, %s/summary.json and %s/plots\n", *out, *out, *out)
}
