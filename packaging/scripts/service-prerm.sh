#!/bin/sh
# prerm for escrad and escra-controller: stop and disable on removal.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop @UNIT@ >/dev/null 2>&1 || true
	systemctl disable @UNIT@ >/dev/null 2>&1 || true
fi
exit 0
