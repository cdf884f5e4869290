#!/bin/sh
# postinst for escrad, escra-controller and escra-gateway, after Debian's own helpers
# (what dh_installsystemd generates, written out here because nfpm has no
# debhelper):
#  - deb-systemd-helper enables @UNIT@ on first install, also in a chroot
#    or image build where systemd does not run (it writes the symlinks and
#    remembers the state), and keeps an admin's "disable" on upgrades;
#  - deb-systemd-invoke starts it on install and restarts it on upgrade,
#    so the new binary runs; it honours policy-rc.d (image builds forbid
#    starts there) and leaves a disabled, stopped unit alone.
# ExecStartPre runs --check-config, so a start with an unfinished
# /etc/escra (no certificates yet) fails with one line in the journal.
set -e
case "$1" in
configure | abort-upgrade | abort-deconfigure | abort-remove)
	# Undo the mask postrm sets on remove (never an admin's own mask).
	deb-systemd-helper unmask @UNIT@ >/dev/null || true
	if deb-systemd-helper --quiet was-enabled @UNIT@; then
		deb-systemd-helper enable @UNIT@ >/dev/null || true
	else
		deb-systemd-helper update-state @UNIT@ >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		# $2 is the version configured before: an upgrade restarts.
		if [ -n "$2" ]; then
			deb-systemd-invoke restart @UNIT@ >/dev/null || true
		else
			deb-systemd-invoke start @UNIT@ >/dev/null || true
		fi
	fi
	;;
esac
exit 0
