#!/usr/bin/env bash
# debroot.sh DIR: unpack a minimal Debian 12 root (debootstrap minbase, plus
# systemd for systemd-analyze) into DIR. The root is built once and cached as
# a tarball under /var/cache/escra/debootstrap/, so only the first run
# downloads (through Debian's mirror, like apt).
set -euo pipefail
die() { echo "debroot: $*" >&2; exit 1; }
[ $# = 1 ] || die "usage: debroot.sh DIR"
dir=$1
cache=${ESCRA_DEBOOTSTRAP_CACHE:-/var/cache/escra/debootstrap}
suite=bookworm
mirror=${ESCRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/$suite-minbase-systemd.tar.gz
command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/setup.sh installs it)"
mkdir -p "$cache" "$dir"
if [ ! -s "$tarball" ]; then
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "debroot: first run: debootstrap $suite (minbase + systemd) into the cache; log $cache/debootstrap.log" >&2
	if ! debootstrap --variant=minbase --include=systemd "$suite" "$tmp/root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
		tail -5 "$cache/debootstrap.log" >&2
		die "debootstrap could not build a $suite root from $mirror (log: $cache/debootstrap.log)"
	fi
	tar -C "$tmp/root" -czf "$tmp/root.tar.gz" .
	mv "$tmp/root.tar.gz" "$tarball"
fi
tar -C "$dir" -xzf "$tarball"
