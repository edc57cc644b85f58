#!/usr/bin/env bash
# Builds the images the local cluster's real nodes need besides autoclusters' own, from this
# machine's Debian packages, with no container engine or registry (docs/real-nodes.md):
#   pause.oci.tar   the pod sandbox image (containerd's sandbox_image): pause.c, linked statically
#                   by Debian's gcc and packed by umoci as a one-file image.
# Usage: tools/node-images/build.sh [OUT_DIR]     (default: build/node-images)
# Skipped when the archive is newer than its source. Needs cc (with the static libc of
# libc6-dev) and umoci.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(cd "$here/../.." && pwd)/build/node-images}
mkdir -p "$out"
archive="$out/pause.oci.tar"
if [ -f "$archive" ] && [ "$archive" -nt "$here/pause.c" ] && [ "$archive" -nt "$here/build.sh" ]; then
  echo "node-images: $archive is up to date"; exit 0
fi
t0=$(date +%s)
tag=pause  # the reference name in the OCI layout: devcluster/realnodes.PAUSE_TAG
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cc -static -Os -s -o "$work/pause" "$here/pause.c"
umoci init --layout "$work/oci"
umoci new --image "$work/oci:$tag"
umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
install -m 0755 "$work/pause" "$work/bundle/rootfs/pause"
umoci repack --image "$work/oci:$tag" "$work/bundle"
umoci config --image "$work/oci:$tag" --config.entrypoint /pause --config.user 65535:65535 \
  --author autoclusters --os linux --architecture amd64
umoci gc --layout "$work/oci"
tar -C "$work/oci" -cf "$archive.tmp" .
mv "$archive.tmp" "$archive"
echo "node-images: $archive ($(du -k "$archive" | cut -f1) KiB) in $(( $(date +%s) - t0 ))s"
