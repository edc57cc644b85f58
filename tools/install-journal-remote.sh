#!/usr/bin/env bash
# Installs Debian's systemd-journal-remote, whose `systemd-journal-remote -o FILE.journal -`
# turns journal export format into a real journal file. The journald kernel log source's
# tests write their journal files with it (tests/unit/detector/test_journal.py); nothing is
# started or enabled. The runtime image does not need it (the source reads journals through
# libsystemd0, which the Debian base image already carries).
#
# Usage: tools/install-journal-remote.sh      (root, or sudo without a password)
# Skips work when the command is already there. Measured: docs/detector.md, "The journald source".
set -euo pipefail
find_tool() {
  command -v systemd-journal-remote 2>/dev/null || { [ -x /lib/systemd/systemd-journal-remote ] &&
    echo /lib/systemd/systemd-journal-remote; }
}
if tool=$(find_tool); then
  echo "install-journal-remote: already installed ($tool)"
  exit 0
fi
command -v apt-get >/dev/null || { echo "install-journal-remote: install systemd-journal-remote with your OS's packages" >&2; exit 1; }
as_root=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-journal-remote: needs root (or sudo) for apt-get" >&2; exit 1; }
  as_root=(sudo -n)
fi
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
# No service may start from the package scripts (there may be no init system at all).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
  "${as_root[@]}" chmod 755 "$policy"; made_policy=1
fi
trap '[ $made_policy = 1 ] && "${as_root[@]}" rm -f "$policy"' EXIT
"${as_root[@]}" apt-get update -q
t1=$(date +%s)
"${as_root[@]}" apt-get install -y -q --no-install-recommends systemd-journal-remote
t2=$(date +%s)
echo "install-journal-remote: apt-get update $((t1 - t0))s, install $((t2 - t1))s ($(find_tool))"
