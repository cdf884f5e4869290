#!/usr/bin/env bash
# Everything CI proves, in order: static checks, unit and integration tests
# (real Docker engine, real cgroups), brief fuzzing, then the kernel path in
# QEMU. Each stage prints its name; the first failure stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

stage() { printf '\n=== %s\n' "$*"; }

stage "static checks (gofmt, go vet)"
bad=$(gofmt -l $(git ls-files '*.go'))
[ -z "$bad" ] || { echo "gofmt would change: $bad" >&2; exit 1; }
go vet ./...

stage "build"
make --no-print-directory build

stage "go test (unit, property, integration with the real engine)"
# -p 1: integration tests share the host's engine and cgroups.
go test -count=1 -p 1 -timeout 20m ./... 2>&1 | tee /tmp/escra-gotest.log

stage "fuzz targets, briefly"
FUZZTIME=${FUZZTIME:-3s} scripts/fuzz.sh

if [ -x vm-tests/run.sh ]; then
	stage "kernel path in QEMU (vm-tests)"
	vm-tests/run.sh
fi
