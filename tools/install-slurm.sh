#!/usr/bin/env bash
# Installs Debian's Slurm (slurmctld, slurmd, the client commands) and munge for the local
# cluster's `--slurm` option and the training scenario. Nothing is started or enabled: the
# local cluster runs the daemons itself, with their state, keys and sockets in its own
# state directory.
#
# Usage: tools/install-slurm.sh      (root, or sudo without a password)
# Skips work when the commands are already there. Measured times: docs/workloads.md.
set -euo pipefail
need=()
for cmd in slurmctld slurmd scontrol sbatch squeue scancel sinfo munged; do
  command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ ${#need[@]} -eq 0 ]; then
  echo "install-slurm: Slurm and munge already installed ($(slurmctld -V))"
  exit 0
fi
command -v apt-get >/dev/null || { echo "install-slurm: missing ${need[*]}; install Slurm and munge with your OS's packages" >&2; exit 1; }
as_root=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-slurm: needs root (or sudo) for apt-get" >&2; exit 1; }
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
"${as_root[@]}" apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge
t2=$(date +%s)
echo "install-slurm: apt-get update $((t1 - t0))s, install $((t2 - t1))s ($(slurmctld -V))"
