#!/bin/sh
# postrm for escrad, escra-controller and escra-gateway. remove: mask the unit while its
# conffiles stay, so nothing starts a half-removed package (postinst
# unmasks on reinstall). purge: forget the enable state and the mask.
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
case "$1" in
remove)
	if [ -x /usr/bin/deb-systemd-helper ]; then
		deb-systemd-helper mask @UNIT@ >/dev/null || true
	fi
	;;
purge)
	if [ -x /usr/bin/deb-systemd-helper ]; then
		deb-systemd-helper purge @UNIT@ >/dev/null || true
		deb-systemd-helper unmask @UNIT@ >/dev/null || true
	fi
	;;
esac
exit 0
