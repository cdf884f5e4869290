#!/usr/bin/env bash
# make bench: the comparison of Escra §VI against Static, Autopilot-style
# and VPA-style limits on real workloads and clients (docs/benchmarks.md).
#   make bench           quick matrix: 9 cells, each policy where a summary key
#                        needs it, 18 s runs × 3 reps (114 runs, about 39 minutes
#                        by its plan on an idle 2-core machine)
#   make bench FULL=1    every load and policy, 60 s runs, 3 repetitions (about
#                        10.5 hours by its plan)
# go run ./bench/cmd/bench-run -plan [-full] prints the plan per cell, no Docker;
# every run prints "plan: N runs, estimated M min" first (docs/benchmarks.md,
# "What the quick matrix runs and why").
# Writes results/bench/{results.json,report.md,summary.json,plots/}.
# Extra flags for bench-run go in BENCH_ARGS (e.g. BENCH_ARGS="-no-escra").
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

for t in docker wrk redis-benchmark; do
	command -v "$t" >/dev/null || { echo "bench: $t missing (run make setup)" >&2; exit 1; }
done
timeout 10 docker version >/dev/null 2>&1 || { echo "bench: no Docker engine answers (run make setup)" >&2; exit 1; }
# escrad and escra-controller come from this tree; the workloads from internal/workloadimages.
make --no-print-directory build >/dev/null

args=(-out results/bench -bin bin)
[ "${FULL:-0}" = 1 ] && args+=(-full)
# shellcheck disable=SC2206
[ -n "${BENCH_ARGS:-}" ] && args+=(${BENCH_ARGS})
mkdir -p results/bench
go build -o bin/bench-run ./bench/cmd/bench-run
exec bin/bench-run "${args[@]}"
