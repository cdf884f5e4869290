#!/usr/bin/env bash
# Print the path of Debian's stock vmlinuz matching the installed
# linux-headers-*-amd64 (scripts/kernel-headers.sh), fetching it once with `apt-get download` into
# /var/cache/escra/stock (nothing is installed on the host). vm-tests boot it
# to show what escra.ko does on a kernel without the Escra hooks.
# scripts/setup.sh fetches it; tests pass --cached and never download.
set -euo pipefail
# ESCRA_KERNEL_VERSION=6.12 picks the 6.12 headers (default 6.1).
kver=${ESCRA_KERNEL_VERSION:-6.1}
if [ "${1:-}" = --cached ]; then
	hdr=$("$(dirname "$0")"/kernel-headers.sh --cached)
else
	hdr=$("$(dirname "$0")"/kernel-headers.sh)
fi
ver=${hdr##*/linux-headers-}
cache=${ESCRA_STOCK_CACHE:-/var/cache/escra/stock}
img=$cache/vmlinuz-$ver
if [ ! -s "$img" ]; then
	[ "${1:-}" = --cached ] && { echo "kernel-stock: $img missing (make setup fetches it)" >&2; exit 1; }
	mkdir -p "$cache"
	echo "[stock] fetching linux-image-$ver (apt-get download)" >&2
	(cd "$cache" && apt-get download -q "linux-image-$ver" >/dev/null 2>&1) ||
		{ echo "kernel-stock: apt-get download linux-image-$ver failed" >&2; exit 1; }
	deb=$(ls "$cache"/linux-image-"$ver"_*.deb | tail -1)
	dpkg-deb --fsys-tarfile "$deb" | tar -x -O "./boot/vmlinuz-$ver" >"$img.tmp"
	mv "$img.tmp" "$img"
	rm -f "$deb"
fi
echo "$img"
