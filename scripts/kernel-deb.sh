#!/usr/bin/env bash
# make kernel-deb: Debian packages of the Escra-patched Linux 6.1 or 6.12,
# with the kernel's own `bindeb-pkg` and LOCALVERSION=-escra:
#   dist/kernel/<version>-<config>/linux-image-<release>-escra_*.deb
#   dist/kernel/<version>-<config>/linux-headers-<release>-escra_*.deb
# The headers are what escra-dkms builds escra.ko against; the package test
# (packaging/cmd/mkdeb, ESCRA_KERNEL_DEBS) proves that in a Debian root.
#
#   ESCRA_KERNEL_VERSION=6.1 | 6.12   the source and patch series (default 6.1)
#   KERNEL_DEB_CONFIG=vm (default)    the VM-test tree `make kernel` builds
#        (tinyconfig + vm-tests/kernel.config): no drivers for real
#        hardware, it boots QEMU only. Proves the packaging and DKMS path;
#        make test packages 6.1 this way, in the built tree itself (a copy
#        rebuilds all of it); the tree then carries the -escra release.
#   KERNEL_DEB_CONFIG=host            a kernel for a real Debian 12 host:
#        Debian's own configuration (the .config of Debian's
#        linux-headers-<version>-amd64, unpacked in the project's cache by
#        scripts/kernel-headers.sh, or KERNEL_DEB_BASE=FILE, e.g.
#        /boot/config-$(uname -r)) + patches/escra-host.config, then
#        `make olddefconfig`. A full distribution build: hours on 2 cores.
#        KERNEL_DEB_LSMOD=FILE (an `lsmod` listing from the target host)
#        shrinks it with localmodconfig to the modules that host loads;
#        KERNEL_DEB_BTF=0 drops Debian's debug info (and so BTF and the
#        -dbg package) for a faster, smaller build.
#   scripts/kernel-deb.sh --config    host only: write and check the
#        .config, build nothing, print its path (scripts/kerneldeb_test.go)
#
# Cached by input hash under /var/cache/escra/kernel-deb/ (ESCRA_KERNEL_DEB_CACHE):
# vm: the `make kernel` tree's hash; host: host-<hash of the source
# version, patches, base config, escra-host.config and the knobs above>.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
log() { printf '[kernel-deb %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { echo "kernel-deb: $*" >&2; exit 1; }

kver=${ESCRA_KERNEL_VERSION:-6.1}
flavour=${KERNEL_DEB_CONFIG:-vm}
case $kver in 6.1 | 6.12) ;; *) die "unknown ESCRA_KERNEL_VERSION=$kver (want 6.1 or 6.12)" ;; esac
case $flavour in vm | host) ;; *) die "unknown KERNEL_DEB_CONFIG=$flavour (want vm or host)" ;; esac
config_only=0
case ${1:-} in
"") ;;
--config) config_only=1 ;;
*) die "usage: kernel-deb.sh [--config]" ;;
esac
[ $config_only = 0 ] || [ "$flavour" = host ] || die "--config is for KERNEL_DEB_CONFIG=host (the VM config is scripts/kernel-build.sh's)"
cache=${ESCRA_KERNEL_DEB_CACHE:-/var/cache/escra/kernel-deb}
jobs=${JOBS:-$(nproc)}
mkdir -p "$cache"

# 6.12's bindeb-pkg drives debhelper (dh_listpackages, dh_builddeb); 6.1's
# does not. Only this target needs it, so set-up does not install it.
need_debhelper() {
	[ "$kver" = 6.12 ] || return 0
	command -v dh_listpackages >/dev/null && return 0
	[ "$(id -u)" = 0 ] || die "6.12's bindeb-pkg needs debhelper: apt-get install debhelper"
	log "installing debhelper (6.12's bindeb-pkg uses it)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debhelper >/tmp/escra-apt.log 2>&1 ||
		{ tail -5 /tmp/escra-apt.log >&2; die "apt-get install debhelper failed"; }
}

# check_config CONFIG FRAGMENT: every option line of the fragment is in
# the final .config, as written (a bool the solver refused shows as
# "is not set" or is missing).
check_config() {
	local line bad=0
	while IFS= read -r line; do
		case $line in CONFIG_*=* | "# CONFIG_"*" is not set") ;; *) continue ;; esac
		grep -qxF "$line" "$1" || { echo "kernel-deb: '$line' did not stick (dependency missing?)" >&2; bad=1; }
	done <"$2"
	[ $bad = 0 ]
}

# bindeb DIR VERSION [DPKG_FLAGS...]: build the packages from the
# configured tree DIR; they land in DIR's parent.
bindeb() {
	local dir=$1 ver=$2
	shift 2
	need_debhelper
	log "bindeb-pkg $ver-escra with -j$jobs"
	# -d: the build dependencies are there (the tree configures and builds);
	# dpkg would otherwise want Debian's exact build-dep set.
	make -C "$dir" -j"$jobs" LOCALVERSION=-escra KDEB_PKGVERSION="$ver-escra1" \
		DPKG_FLAGS="-d $*" bindeb-pkg 2>&1 | grep -E --line-buffered "dpkg-deb: building|error|Error" >&2 || true
	ls "$dir"/../linux-headers-*-escra_*.deb "$dir"/../linux-image-*-escra_*.deb >/dev/null 2>&1 ||
		die "bindeb-pkg produced no packages (rerun: make -C $dir LOCALVERSION=-escra bindeb-pkg)"
}

if [ "$flavour" = vm ]; then
	src=$(scripts/kernel-build.sh | tail -1)
	[ -f "$src/Module.symvers" ] || die "$src is not a built tree"
	key=$(basename "$(dirname "$src")")
	work=$cache/$key
	exec 9>"$cache/$key.lock"
	flock 9
	if [ ! -e "$work/.done" ]; then
		start=$SECONDS
		rm -rf "${work:?}"
		mkdir -p "$work"
		# In the built tree itself, under its build lock: a copy at
		# another path rebuilds everything (objtool's build records
		# absolute paths, and every object depends on objtool). Here only
		# the release string changes (-escra): the few objects that
		# include utsrelease.h, the modules and the link. The tree keeps
		# that release, so the vm-tests' escra.ko and bzImage still agree.
		exec 8>"$(dirname "$src").lock"
		flock 8
		bindeb "$src" "$(make -s -C "$src" kernelversion)"
		mv "$src"/../linux-*-escra*.deb "$work"/
		rm -f "$src"/../linux-upstream_* "$src"/../linux-libc-dev_*
		exec 8>&-
		touch "$work/.done"
		log "done in $((SECONDS - start))s"
	fi
else
	tarball=/usr/src/linux-source-$kver.tar.xz
	patchdir=$repo/patches/linux-$kver
	fragment=$repo/patches/escra-host.config
	[ -r "$tarball" ] || die "$tarball missing; run make setup (linux-source-$kver)"
	base=${KERNEL_DEB_BASE:-}
	if [ -z "$base" ]; then
		# Debian's linux-headers-<abi>-amd64 ships the .config its kernel
		# was built with: 6.1.0-56-amd64 for 6.1, 6.12.117+deb12-amd64 for 6.12.
		hdr=$(ESCRA_KERNEL_VERSION=$kver scripts/kernel-headers.sh) ||
			die "no Debian $kver headers to take the .config from; set KERNEL_DEB_BASE=/boot/config-..."
		base=$hdr/.config
	fi
	[ -r "$base" ] || die "KERNEL_DEB_BASE=$base is not readable"
	lsmod_file=${KERNEL_DEB_LSMOD:-}
	[ -z "$lsmod_file" ] || [ -r "$lsmod_file" ] || die "KERNEL_DEB_LSMOD=$lsmod_file is not readable"
	btf=${KERNEL_DEB_BTF:-1}
	case $btf in 0 | 1) ;; *) die "KERNEL_DEB_BTF=$btf (want 0 or 1)" ;; esac
	srcver=$(dpkg-query -W -f='${Version}' "linux-source-$kver" 2>/dev/null || stat -c '%s-%Y' "$tarball")
	# recipe: bump when the steps below change what they produce.
	key=host-$( {
		echo "recipe 1 $kver $srcver btf=$btf"
		cat "$patchdir"/*.patch "$fragment" "$base"
		[ -z "$lsmod_file" ] || awk 'NR > 1 {print $1}' "$lsmod_file" | sort
	} | sha256sum | cut -c1-16)
	work=$cache/$key
	dir=$work/linux
	exec 9>"$cache/$key.lock"
	flock 9
	if [ ! -e "$work/.configured" ]; then
		start=$SECONDS
		rm -rf "${work:?}"
		mkdir -p "$dir"
		log "unpacking linux-source $srcver into $work"
		tar -xJf "$tarball" -C "$dir" --strip-components=1
		for p in "$patchdir"/*.patch; do
			log "applying $(basename "$p")"
			patch -d "$dir" -p1 -s --forward <"$p"
		done
		log "config: $base + escra-host.config${lsmod_file:+ + localmodconfig ($lsmod_file)}$([ "$btf" = 1 ] || echo ' - debug info/BTF')"
		cp "$base" "$dir/.config"
		"$dir"/scripts/kconfig/merge_config.sh -m -O "$dir" "$dir/.config" "$fragment" >/dev/null
		make -s -C "$dir" olddefconfig >/dev/null
		if [ -n "$lsmod_file" ]; then
			# localmodconfig keeps =y as it is and drops the =m modules
			# the listing does not name.
			make -s -C "$dir" LSMOD="$(realpath "$lsmod_file")" localmodconfig </dev/null >/dev/null 2>&1 ||
				die "localmodconfig with $lsmod_file failed"
		fi
		if [ "$btf" = 0 ]; then
			"$dir"/scripts/config --file "$dir/.config" --disable DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT \
				--disable DEBUG_INFO_DWARF4 --disable DEBUG_INFO_DWARF5 --enable DEBUG_INFO_NONE \
				--disable DEBUG_INFO --disable DEBUG_INFO_BTF
		fi
		make -s -C "$dir" olddefconfig >/dev/null
		check_config "$dir/.config" "$fragment" || die "the Escra options did not all stick over $base"
		grep -q '^CONFIG_DEBUG_INFO_BTF=y' "$dir/.config" && ! command -v pahole >/dev/null &&
			die "CONFIG_DEBUG_INFO_BTF=y needs pahole (apt-get install dwarves), or set KERNEL_DEB_BTF=0"
		cp "$dir/.config" "$work/config"
		touch "$work/.configured"
		log "configured in $((SECONDS - start))s: $work/config"
	fi
	if [ $config_only = 1 ]; then
		echo "$work/config"
		exit 0
	fi
	if [ ! -e "$work/.done" ]; then
		[ -d "$dir" ] || die "$dir is gone but $work/.done is not there: rm -rf $work and rerun"
		start=$SECONDS
		log "building Debian's configuration of $kver with the Escra patches: hours on 2 cores"
		profiles=()
		# 6.12 can leave out the -dbg package (vmlinux and every module's
		# debug info, gigabytes); 6.1's bindeb-pkg has no such switch.
		[ "$kver" = 6.12 ] && profiles=(--build-profiles=pkg.linux-upstream.nokerneldbg)
		bindeb "$dir" "$(make -s -C "$dir" kernelversion)" "${profiles[@]}"
		rm -rf "${dir:?}"
		touch "$work/.done"
		log "done in $((SECONDS - start))s"
	fi
fi

# The headers' host tools (objtool, modpost) are linked against libelf;
# bindeb-pkg does not say so, and DKMS then fails with "libelf.so.1:
# cannot open shared object file" on a host without it.
hdr=$(ls "$work"/linux-headers-*-escra_*.deb)
if [ -z "$(dpkg-deb -f "$hdr" Depends)" ]; then
	rm -rf "$work/hdr" && dpkg-deb -R "$hdr" "$work/hdr"
	sed -i '/^Architecture:/a Depends: libelf1' "$work/hdr/DEBIAN/control"
	dpkg-deb -b -Zgzip "$work/hdr" "$hdr" >/dev/null
	rm -rf "$work/hdr"
fi
# One directory per version and configuration: the package test wants
# exactly one image and one headers package in the directory it is given.
out=dist/kernel/$kver-$flavour
rm -rf "$out"
mkdir -p "$out"
cp "$work"/linux-image-*-escra_*.deb "$work"/linux-headers-*-escra_*.deb "$out/"
ls "$out"/*.deb >&2
echo "$out"
