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
# Every module's go.mod and go.sum must be tidy (-e: nfpm's test-only
# dependencies answer 403 from the module proxy; they are never built).
# packaging/ is a module of its own: vet and staticcheck it there.
for mod in . packaging; do
	d=$(cd "$mod" && go mod tidy -e -diff 2>/dev/null) || true
	if [ -n "$d" ]; then
		echo "lint: go mod tidy -e would change $mod/go.mod or go.sum:" >&2
		echo "$d" >&2
		exit 1
	fi
done
(cd packaging && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...)
