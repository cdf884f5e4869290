#!/usr/bin/env bash
# Generate Go code from proto/escra.proto into $1 (default: proto/escrapb).
# Tool versions are pinned: protoc from Debian 12 (3.21.12) and
# protoc-gen-go from the version go.mod requires.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/proto/escrapb}
want_protoc="libprotoc 3.21.12"

have=$(protoc --version 2>/dev/null || true)
if [ "$have" != "$want_protoc" ]; then
	echo "genproto: need '$want_protoc' (Debian 12 protobuf-compiler), found '${have:-none}'; run scripts/setup.sh" >&2
	exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
mkdir -p "$out"
PATH="$bin:$PATH" protoc -I "$root/proto" \
	--go_out="$out" --go_opt=paths=source_relative \
	"$root/proto/escra.proto"
