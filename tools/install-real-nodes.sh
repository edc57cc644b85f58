#!/usr/bin/env bash
# Installs what the local cluster's real nodes run on besides the kubelet and kube-proxy (which
# `tools/build-tools.sh kube-node` builds): Debian's containerd and runc, the CNI plugins
# (bridge, host-local, portmap, loopback), iptables for kube-proxy, umoci and the static C
# library for the pod sandbox image; then builds that image (tools/node-images/build.sh).
# Nothing is started or enabled. Measured: docs/real-nodes.md, "What it costs".
#
# Usage: tools/install-real-nodes.sh      (root, or sudo without a password)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
missing=()
for b in containerd containerd-shim-runc-v2 ctr runc iptables umoci cc; do
  command -v "$b" >/dev/null || missing+=("$b")
done
[ -x /usr/lib/cni/bridge ] || missing+=(cni)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/libc.a ] || missing+=(libc.a)
if [ ${#missing[@]} -gt 0 ]; then
  "$here/apt-install.sh" install-real-nodes containerd runc containernetworking-plugins iptables umoci gcc libc6-dev
else
  echo "install-real-nodes: containerd, runc, the CNI plugins, iptables and umoci are installed"
fi
"$here/node-images/build.sh"
