#!/usr/bin/env bash
# vm-tests/twohost/root.sh: print the directory holding the two-host
# scenario's guest root (root.img, an ext4 image), Debian's stock kernel and
# initrd from inside it (vmlinuz, initrd.img) and the harness's ssh key
# (id_ed25519), building them once. Cached under
# /var/cache/escra/twohost/KEY, KEY the hash of this script.
#
# The root is packaging/debroot.sh's Debian 12 minbase + systemd, then apt
# inside it (the chroot's own apt, through the same mirror and the host's
# apt.conf.d, as debroot.sh does): docker.io, openssh, the stock
# linux-image-amd64 and its initramfs, networkd addresses for both guests.
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "twohost-root: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (chroot, mkfs.ext4 -d with owners)"
command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 is missing (e2fsprogs)"

# apparmor: docker.io recommends it, and Debian's kernel enables AppArmor,
# so dockerd refuses to start containers without apparmor_parser.
pkgs=(systemd-sysv udev dbus docker.io apparmor openssh-server openssh-client
	linux-image-amd64 initramfs-tools iproute2 procps kmod less)
key=$(cat "$0" packaging/debroot.sh | sha256sum | cut -c1-16)
cache=${ESCRA_TWOHOST_CACHE:-/var/cache/escra/twohost}
out=$cache/$key
if [ -s "$out/root.img" ] && [ -s "$out/vmlinuz" ] && [ -s "$out/initrd.img" ]; then
	echo "$out"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
root=$tmp/root
mounted=()
cleanup() {
	local m
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
log=$cache/build.log
echo "twohost-root: building the guest root (log $log)" >&2
packaging/debroot.sh "$root" >"$log" 2>&1 || { tail -5 "$log" >&2; die "debroot.sh failed"; }

# The host's resolver and apt configuration (proxies), so apt in the
# chroot fetches exactly as apt on the host does.
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp -r /etc/apt/apt.conf.d/. "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" # start nothing in the chroot
chmod +x "$root/usr/sbin/policy-rc.d"
for m in proc sys dev dev/pts; do
	mount --bind "/$m" "$root/$m"
	mounted+=("$root/$m")
done
echo "twohost-root: apt-get install ${pkgs[*]} (in the chroot)" >&2
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$log" 2>&1 ||
	{ tail -5 "$log" >&2; die "apt-get update in the chroot failed"; }
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >>"$log" 2>&1 ||
	{ tail -5 "$log" >&2; die "apt-get install in the chroot failed"; }
chroot "$root" apt-get clean
for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}"; done
mounted=()
rm -f "$root/usr/sbin/policy-rc.d"
: >"$root/etc/resolv.conf"

# Guests: ctl1 = 10.0.0.1, node2 = 10.0.0.2 on the socket network between
# them (MAC 52:54:00:12:00:0N); 10.0.2.15 on QEMU's restricted user network,
# which only carries the harness's ssh (hostfwd on 127.0.0.1).
rm -f "$root/etc/hostname"
cat >>"$root/etc/hosts" <<'HOSTS'
10.0.0.1	ctl1
10.0.0.2	node2
HOSTS
for n in 1 2; do
	cat >"$root/etc/systemd/network/10-lan$n.network" <<NET
[Match]
MACAddress=52:54:00:12:00:0$n

[Network]
Address=10.0.0.$n/24
NET
done
cat >"$root/etc/systemd/network/20-harness.network" <<'NET'
[Match]
MACAddress=52:54:00:aa:00:01 52:54:00:aa:00:02

[Network]
Address=10.0.2.15/24
NET
ln -sf /lib/systemd/system/systemd-networkd.service "$root/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
# No console login prompt to wait for, no password: root logs in by key.
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$root/etc/systemd/system/systemd-networkd-wait-online.service"
echo '/dev/vda / ext4 rw,noatime 0 1' >"$root/etc/fstab"

# One key for the harness and for root between the guests (the quick
# start's scp from ctl1 to node2).
mkdir -p -m 700 "$root/root/.ssh"
ssh-keygen -q -t ed25519 -N '' -C escra-twohost -f "$root/root/.ssh/id_ed25519"
cp "$root/root/.ssh/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
cat >"$root/root/.ssh/config" <<'SSH'
Host ctl1 node2
	StrictHostKeyChecking no
	UserKnownHostsFile /dev/null
	LogLevel ERROR
SSH

mkdir -p "$tmp/out"
cp "$root/root/.ssh/id_ed25519" "$tmp/out/id_ed25519"
cp "$(ls "$root"/boot/vmlinuz-* | tail -1)" "$tmp/out/vmlinuz"
cp "$(ls "$root"/boot/initrd.img-* | tail -1)" "$tmp/out/initrd.img"
echo "twohost-root: mkfs.ext4 -d (4 GiB sparse image)" >&2
truncate -s 4G "$tmp/out/root.img"
mkfs.ext4 -q -F -L escraroot -d "$root" "$tmp/out/root.img" >>"$log" 2>&1 ||
	{ tail -5 "$log" >&2; die "mkfs.ext4 -d failed"; }
rm -rf "$out"
mv "$tmp/out" "$out"
# Roots of older inputs are dead weight (4 GiB sparse each).
for d in "$cache"/*/; do
	d=${d%/}
	case ${d##*/} in "$key" | build.*) ;; *) rm -rf "$d" ;; esac
done
echo "$out"
