#!/usr/bin/env bash
# Installs Debian packages for a test prerequisite with apt-get, starting no service, and
# says how long it took. Shared by tools/install-slurm.sh and tools/install-journal-remote.sh.
#
# Usage: tools/apt-install.sh LABEL PACKAGE...      (root, or sudo without a password)
# Prints "LABEL: apt-get update Ns, install Ms" on success.
set -euo pipefail
label=$1; shift
command -v apt-get >/dev/null || { echo "$label: install $* with your OS's packages" >&2; exit 1; }
as_root=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "$label: needs root (or sudo) for apt-get" >&2; exit 1; }
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
"${as_root[@]}" apt-get install -y -q --no-install-recommends "$@"
t2=$(date +%s)
echo "$label: apt-get update $((t1 - t0))s, install $((t2 - t1))s"
