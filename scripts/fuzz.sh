#!/usr/bin/env bash
# Run every `func FuzzXxx` target of the module for FUZZTIME each: a
# duration ("60s") or an execution count ("20000x"). CI uses a count: with a
# duration, Go 1.26's fuzz coordinator can report its own deadline as a
# failure ("context deadline exceeded", golang/go#75804, fixed in Go 1.27)
# when a worker is starved at the boundary. A count has no deadline to race.
# A duration run that ends that way without writing a failing input is that
# bug, not a finding, and is run once more; anything else fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20000x}
log=$(mktemp /tmp/escra-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT

# coordinator_deadline LOG: the run failed only on the coordinator's deadline.
coordinator_deadline() {
	grep -q 'context deadline exceeded' "$1" &&
		! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$1"
}

fuzz_one() { # PKG NAME
	go test -run='^$' -fuzz="^$2\$" -fuzztime="$fuzztime" "$1" >"$log" 2>&1
}

n=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "fuzz: $pkg $name ($fuzztime)"
	if ! fuzz_one "$pkg" "$name"; then
		if coordinator_deadline "$log"; then
			echo "fuzz: $name: coordinator deadline with no failing input (golang/go#75804); once more" >&2
			fuzz_one "$pkg" "$name" || { cat "$log" >&2; echo "fuzz: $name failed" >&2; exit 1; }
		else
			cat "$log" >&2
			echo "fuzz: $name failed" >&2
			exit 1
		fi
	fi
	n=$((n + 1))
done < <(grep -rn -E '^func Fuzz[A-Za-z0-9_]+\(' --include='*_test.go' --exclude-dir=.git --exclude-dir=.cache --exclude-dir=results . |
	sed -E 's#^\./##; s/^([^:]+):[0-9]+:func (Fuzz[A-Za-z0-9_]+).*/\1:\2/' | sort)
echo "fuzz: $n targets ran for $fuzztime each"
