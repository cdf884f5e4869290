#!/usr/bin/env bash
# debroot.sh [--dkms] DIR: unpack a minimal Debian 12 root (debootstrap
# minbase, plus systemd for systemd-analyze) into DIR. debroot.sh --tarball: make sure
# the cached root exists and print its path (the package test boots it
# under systemd in a container). The root is built once and cached as
# a tarball under /var/cache/escra/debootstrap/, so only the first run
# downloads (through Debian's mirror, like apt).
set -euo pipefail
die() { echo "debroot: $*" >&2; exit 1; }
# --dkms (first): the root also has dkms and a compiler, for building
# escra.ko against the Escra kernel headers (a second cached tarball).
include=systemd
flavor=systemd
if [ "${1:-}" = --dkms ]; then
	# libelf1: the headers' objtool needs it (linux-headers-*-escra
	# depends on it).
	include=systemd,dkms,gcc,make,libc6-dev,kmod,libelf1
	flavor=dkms-$(echo "$include" | sha256sum | cut -c1-8)
	shift
fi
[ $# = 1 ] || die "usage: debroot.sh [--dkms] DIR | [--dkms] --tarball"
dir=$1
[ "$dir" != --tarball ] || dir=
cache=${ESCRA_DEBOOTSTRAP_CACHE:-/var/cache/escra/debootstrap}
suite=bookworm
mirror=${ESCRA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/$suite-minbase-$flavor.tar.gz
command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/setup.sh installs it)"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "debroot: first run: debootstrap $suite (minbase + $include) into the cache; log $cache/debootstrap.log" >&2
	if ! debootstrap --variant=minbase --include=$include "$suite" "$tmp/root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
		tail -5 "$cache/debootstrap.log" >&2
		die "debootstrap could not build a $suite root from $mirror (log: $cache/debootstrap.log)"
	fi
	tar -C "$tmp/root" -czf "$tmp/root.tar.gz" .
	mv "$tmp/root.tar.gz" "$tarball"
fi
if [ -z "$dir" ]; then
	echo "$tarball"
	exit 0
fi
mkdir -p "$dir"
tar -C "$dir" -xzf "$tarball"
