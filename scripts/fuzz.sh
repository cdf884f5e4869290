#!/usr/bin/env bash
# Run every `func FuzzXxx` target of the module for FUZZTIME each.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "fuzz: $pkg $name ($fuzztime)"
	go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg" >/tmp/escra-fuzz.log 2>&1 ||
		{ cat /tmp/escra-fuzz.log >&2; echo "fuzz: $name failed" >&2; exit 1; }
	n=$((n + 1))
done < <(grep -rn -E '^func Fuzz[A-Za-z0-9_]+\(' --include='*_test.go' --exclude-dir=.git --exclude-dir=.cache --exclude-dir=results . |
	sed -E 's#^\./##; s/^([^:]+):[0-9]+:func (Fuzz[A-Za-z0-9_]+).*/\1:\2/' | sort)
echo "fuzz: $n targets ran for $fuzztime each"
