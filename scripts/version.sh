#!/usr/bin/env bash
# Print the build's version, the one the binaries report and the packages
# carry. VERSION holds the release being made (semver X.Y.Z); the
# annotated tag vX.Y.Z marks it (git tag -a "v$(cat VERSION)").
#   at the tag vX.Y.Z                 X.Y.Z
#   after it, VERSION not yet bumped  X.Y.Z+N.gHASH  (sorts after X.Y.Z)
#   before it (no tag vX.Y.Z yet)     X.Y.Z~N.gHASH  (sorts before X.Y.Z)
# N counts commits since the last v* tag (the whole history without one),
# so later builds sort later; ".dirty" marks uncommitted changes. Outside
# a git checkout: X.Y.Z~dev.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(tr -d ' \t\n' <VERSION)
[[ $ver =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "version: VERSION holds \"$ver\", want X.Y.Z" >&2; exit 1; }
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "$ver~dev"
	exit 0
fi
dirty=
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
hash=$(git rev-parse --short=7 HEAD)
if git rev-parse -q --verify "refs/tags/v$ver" >/dev/null; then
	n=$(git rev-list --count "v$ver..HEAD")
	if [ "$n" = 0 ]; then
		echo "$ver$dirty"
	else
		echo "$ver+$n.g$hash$dirty"
	fi
	exit 0
fi
if last=$(git describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null); then
	n=$(git rev-list --count "$last..HEAD")
else
	n=$(git rev-list --count HEAD)
fi
echo "$ver~$n.g$hash$dirty"
