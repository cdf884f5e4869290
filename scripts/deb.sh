#!/usr/bin/env bash
# Build the Debian packages escrad, escra-controller (with escractl),
# escra-gateway and escra-dkms into dist/ from bin/ (make build) with nfpm,
# through packaging/cmd/mkdeb. VERSION defaults to scripts/version.sh (the
# VERSION file and git describe).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
version=${VERSION:-$(scripts/version.sh)}
for b in escrad escra-controller escractl escra-gateway; do
	[ -x "bin/$b" ] || { echo "deb: bin/$b missing: run make build first" >&2; exit 1; }
done
# The package's escrad must carry the bpf backend (make build compiles
# its object with clang); a bare go build would leave it out.
scripts/bpf.sh --in bin/escrad ||
	{ echo "deb: bin/escrad was built without the BPF object: run make build (needs clang)" >&2; exit 1; }
mkdir -p dist
echo "deb: packaging version $version into dist/" >&2
# packaging/ is its own Go module (nfpm and its graph stay out of the
# daemons' go.mod; README, "Go modules").
(cd packaging && CGO_ENABLED=0 go run ./cmd/mkdeb --version "$version" --bin ../bin --root .. --out ../dist)
