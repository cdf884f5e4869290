#!/usr/bin/env bash
# gofmt, go vet and staticcheck over the module. staticcheck is pinned and
# comes through the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$bad" ]; then
	echo "lint: gofmt would change:" $bad >&2
	exit 1
fi
go vet ./...
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
