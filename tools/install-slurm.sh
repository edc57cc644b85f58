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
"$(dirname "$0")/apt-install.sh" install-slurm slurmctld slurmd slurm-client munge
echo "install-slurm: $(slurmctld -V)"
