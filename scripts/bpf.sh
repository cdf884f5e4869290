#!/usr/bin/env bash
# bpf.sh: build the bpf backend's BPF object (docs/kernel-bpf.md)
# from daemon/source/bpf/c/ with clang, into
# daemon/source/bpf/obj/cfs_bpfel.o (not tracked), which go:embed puts
# into escrad. make build (so make run and make deb), make bench-bpf and
# scripts/test.sh run it before building escrad; a build without it still
# compiles, and its bpf backend says "object not built".
#
# The object is cached by a sha256 of its inputs: the sources in c/, the
# libbpf headers, the clang version and the flags, under
# /var/cache/escra/bpf/KEY.o. A repeated build copies the cached object
# and compiles nothing (it asks clang for its version). The flags are
# bpf2go's for gen.go's arguments (unstripped: no llvm-strip, so no llvm
# to install): TestObjectRebuilds checks that both make the same bytes.
#
#   scripts/bpf.sh             build the object (or take it from the cache)
#   scripts/bpf.sh --key       print the cache key, build nothing
#   scripts/bpf.sh --bindings  regenerate cfs_bpfel.go and cfs.sum with
#                              bpf2go (make bpf; after a type changes in c/)
#   scripts/bpf.sh --in FILE   exit 0 when the escrad binary FILE embeds
#                              the object (its tp_btf section names)
#
# Needs clang and libbpf-dev (scripts/setup.sh run installs them).
# Environment: BPF_CC, ESCRA_BPF_CACHE (default: the one above,
# or ~/.cache/escra/bpf where that is not writable), ESCRA_BPF_DIR (the
# package directory; tests).
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=$(cd "${ESCRA_BPF_DIR:-$root/daemon/source/bpf}" && pwd)
cache=${ESCRA_BPF_CACHE:-/var/cache/escra/bpf}
cc=${BPF_CC:-clang}
inc=/usr/include/bpf # libbpf-dev's, on clang's include path
out=$pkg/obj/cfs_bpfel.o

die() { echo "bpf: $*" >&2; exit 1; }

# The sources, as gen.go names them (relative to the package).
srcs=(c/cfs.bpf.c c/cfs.h)
# bpf2go's clang command for gen.go's arguments: its defaults (-O2 -mcpu=v1),
# gen.go's -cflags and -- flags, then the ones it always adds. It runs in
# the package directory with the source's absolute path, mapped back to
# c/ in the debug info (so the bytes do not depend on the checkout).
flags=(-O2 -mcpu=v1 -O2 -g -Wall -Werror -Ic -Wunused-command-line-argument -target bpfel
	-c "$pkg/c/cfs.bpf.c" -fno-ident "-fdebug-prefix-map=$pkg/c=c" -fdebug-compilation-dir . -g
	'-D__BPF_TARGET_MISSING="GCC error \"The eBPF is using target specific macros, please provide -target that is not bpf, bpfel or bpfeb\""')

# bindings DIR: bpf2go, with gen.go's arguments, writes the Go types and
# loader into DIR/cfs_bpfel.go and its own object into DIR/cfs_bpfel.o. Its
# go:embed of the object beside the Go file is cut: the object lives in
# obj/ instead (obj.go embeds it; a checkout without it still compiles).
bindings() {
	local line
	line=$(sed -n 's|^//\tbpf2go \(-.*\)|\1|p' "$pkg/gen.go")
	[ -n "$line" ] || die "gen.go names no bpf2go arguments"
	eval "set -- $line"
	(cd "$pkg" && GOPACKAGE=bpf go run github.com/cilium/ebpf/cmd/bpf2go -output-dir "$dir" "$@") || die "bpf2go failed"
	sed '/^\/\/ Do not access this directly\.$/,$d' "$dir/cfs_bpfel.go" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$dir/cut.go"
	! grep -q 'go:embed' "$dir/cut.go" || die "bpf2go's output changed: its go:embed of the object is still there"
	mv "$dir/cut.go" "$dir/cfs_bpfel.go"
}
case ${1:-} in
--in)
	[ $# = 2 ] || die "usage: bpf.sh --in FILE"
	# A section name of the object, which no Go source spells: present
	# in escrad only with the object embedded.
	exec grep -qaF 'tp_btf/hrtimer_expire_entry' "$2"
	;;
--bindings-to) # DIR: for TestObjectRebuilds
	[ $# = 2 ] || die "usage: bpf.sh --bindings-to DIR"
	dir=$(cd "$2" && pwd)
	bindings
	exit 0
	;;
--bindings)
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	bindings
	mv "$dir/cfs_bpfel.go" "$pkg/cfs_bpfel.go"
	(cd "$pkg" && sha256sum "${srcs[@]}") >"$pkg/cfs.sum"
	echo "bpf: wrote $pkg/cfs_bpfel.go and cfs.sum (scripts/bpf.sh builds the object)" >&2
	exit 0
	;;
esac

command -v "$cc" >/dev/null || die "$cc not found: the BPF object is built from source (scripts/setup.sh run installs clang and libbpf-dev)"
[ -r "$inc/bpf_helpers.h" ] || die "libbpf headers missing in $inc (libbpf-dev; scripts/setup.sh run installs it)"

# Every input of the bytes: the flags (with the package path mapped out,
# as in the object), the compiler's version, the sources and all libbpf
# headers (not only the ones included today).
key=$(
	{
		printf '%s\n' "${flags[@]//"$pkg"/PKG}"
		"$cc" --version
		cd "$pkg" && sha256sum "${srcs[@]}"
		cd "$inc" && sha256sum ./*.h
	} | sha256sum | cut -c1-32
)
if [ "${1:-}" = --key ]; then
	echo "$key"
	exit 0
fi
[ $# = 0 ] || die "usage: bpf.sh [--key | --in FILE | --bindings | --bindings-to DIR]"

# install FILE: FILE becomes the object (and its sources' sums) in obj/,
# each by rename, so a concurrent go build sees the old or the new one.
install_obj() {
	mkdir -p "$pkg/obj"
	if ! cmp -s "$1" "$out"; then
		cp "$1" "$out.tmp.$$"
		mv "$out.tmp.$$" "$out"
	fi
	(cd "$pkg" && sha256sum "${srcs[@]}") >"$pkg/obj/cfs.sum.tmp.$$"
	mv "$pkg/obj/cfs.sum.tmp.$$" "$pkg/obj/cfs.sum"
}

if [ -z "${ESCRA_BPF_CACHE:-}" ] && ! { mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ]; }; then
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/escra/bpf
fi
mkdir -p "$cache"
if [ -s "$cache/$key.o" ]; then
	install_obj "$cache/$key.o"
	echo "bpf: cached object $key" >&2
	exit 0
fi
tmp=$(mktemp "$cache/build.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$pkg" && "$cc" "${flags[@]}" -o "$tmp") || die "clang failed on $pkg/c/cfs.bpf.c"
chmod 0644 "$tmp"
mv "$tmp" "$cache/$key.o"
install_obj "$cache/$key.o"
echo "bpf: built object $key ($(stat -c %s "$out") bytes) from $pkg/c" >&2
