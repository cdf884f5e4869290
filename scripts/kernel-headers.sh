#!/usr/bin/env bash
# Print the directory of Debian's stock linux-headers-<abi>-amd64 for the
# kernel series ESCRA_KERNEL_VERSION (6.1 by default, or 6.12), unpacked
# into the project's cache. Nothing is installed on the host: Debian's 6.12
# headers package depends on a linux-image package, and installing it would
# change what the host boots. The packages are fetched once with
# `apt-get download` (headers, their -common half, the matching kbuild) and
# unpacked with dpkg-deb into /var/cache/escra/headers/<abi>/.
#
#   scripts/kernel-headers.sh            fetch if needed, print the tree
#   scripts/kernel-headers.sh --cached   print the tree, never download
#   scripts/kernel-headers.sh --abi      print the ABI name only (6.1.0-57-amd64)
#
# Users: kernel-kmod.sh --stock (the stub module), kernel-stock.sh (the
# matching vmlinuz), kernel-deb.sh (Debian's .config for host kernels).
set -euo pipefail
die() { echo "kernel-headers: $*" >&2; exit 1; }

kver=${ESCRA_KERNEL_VERSION:-6.1}
case $kver in
6.1) meta=linux-headers-amd64 ;;
6.12) meta=linux-headers-6.12-amd64 ;;
*) die "unknown ESCRA_KERNEL_VERSION=$kver (want 6.1 or 6.12)" ;;
esac
cache=${ESCRA_HEADERS_CACHE:-/var/cache/escra/headers}
mode=${1:-}
case $mode in "" | --cached | --abi) ;; *) die "usage: kernel-headers.sh [--cached|--abi]" ;; esac

# The newest unpacked tree of this series, if any.
cached_tree() {
	local done
	done=$(ls "$cache"/"$kver".[0-9]*-amd64/.done 2>/dev/null | grep -v -e -cloud- -e -rt- | sort -V | tail -1 || true)
	[ -z "$done" ] || ls -d "$(dirname "$done")"/usr/src/linux-headers-*-amd64
}

if [ "$mode" = --cached ]; then
	tree=$(cached_tree)
	[ -n "$tree" ] || die "no $kver headers in $cache (make setup fetches them)"
	echo "$tree"
	exit 0
fi

# depends PKG PATTERN: the first dependency of PKG whose name matches.
depends() {
	apt-cache depends "$1" 2>/dev/null | awk -v re="$2" '$1 == "Depends:" && $2 ~ re {print $2; exit}'
}
pkg=$(depends "$meta" '^linux-headers-')
if [ -z "$pkg" ]; then
	# apt has no lists yet on a new machine.
	apt-get update -q >/tmp/escra-apt.log 2>&1 || die "apt-get update failed (log: /tmp/escra-apt.log)"
	pkg=$(depends "$meta" '^linux-headers-')
fi
[ -n "$pkg" ] || die "apt knows no $meta (Debian 12's package lists)"
abi=${pkg#linux-headers-}
if [ "$mode" = --abi ]; then
	echo "$abi"
	exit 0
fi

root=$cache/$abi
tree=$root/usr/src/$pkg
if [ ! -e "$root/.done" ]; then
	common=$(depends "$pkg" '^linux-headers-.*-common$')
	kbuild=$(depends "$pkg" '^linux-kbuild-')
	[ -n "$common" ] && [ -n "$kbuild" ] || die "cannot resolve $pkg's -common and kbuild packages"
	mkdir -p "$cache"
	exec 9>"$cache/$abi.lock"
	flock 9
	if [ ! -e "$root/.done" ]; then
		rm -rf "${root:?}"
		mkdir -p "$root/debs"
		echo "[headers] fetching $pkg $common $kbuild (apt-get download)" >&2
		(cd "$root/debs" && apt-get download -q "$pkg" "$common" "$kbuild" >/tmp/escra-apt.log 2>&1) ||
			die "apt-get download $pkg failed (log: /tmp/escra-apt.log)"
		for deb in "$root"/debs/*.deb; do
			dpkg-deb -x "$deb" "$root"
		done
		rm -rf "${root:?}/debs"
		# Debian's headers Makefile includes its -common half by absolute
		# path; point it at the cache. The scripts and tools symlinks are
		# relative and resolve inside the cache as they do under /.
		sed -i "s#^include /usr/src/#include $root/usr/src/#" "$tree/Makefile"
		[ -r "$tree/.config" ] || die "$tree has no .config after unpacking"
		touch "$root/.done"
	fi
fi
echo "$tree"
