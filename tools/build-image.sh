#!/usr/bin/env bash
# Builds the autoclusters runtime image (the one the Containerfile describes) into an OCI
# archive, with no container engine, daemon or registry: Debian's debootstrap makes the
# base root filesystem (Debian bookworm, minbase + python3: what the Containerfile's
# debian:bookworm-slim + python3 is), image/install.sh installs the project into it under
# chroot, and umoci packs it as a one-layer OCI image. Needs root (chroot, file owners)
# and the Debian packages debootstrap and umoci (`tools/build-image.sh deps` installs them
# with runc, which the image tests run the image with).
#
# Usage: tools/build-image.sh [build|deps]        (default: build)
# Output: build/image/autoclusters-<version>.oci.tar (OCI layout in a tar, the reference
#         name inside is the tag); a build whose inputs did not change is skipped.
# The Debian mirror is the one this machine's apt sources use ($AUTOCLUSTERS_DEBIAN_MIRROR
# overrides it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${AUTOCLUSTERS_IMAGE_DIR:-$root/build/image}
py=${PYTHON:-$root/.venv/bin/python}
suite=bookworm
t0=$(date +%s)
log() { printf '[build-image %4ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

packages=(debootstrap umoci runc)
deps() {
  local missing=()
  for p in "${packages[@]}"; do command -v "$p" >/dev/null || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} from Debian (apt-get)"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 \
    "${missing[@]}" >/dev/null
  log "installed ${missing[*]}"
}

mirror() { # the first Debian archive this machine's apt sources name
  if [ -n "${AUTOCLUSTERS_DEBIAN_MIRROR:-}" ]; then echo "$AUTOCLUSTERS_DEBIAN_MIRROR"; return; fi
  local url
  url=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' |
        grep -v -- '-security' | head -n 1 || true)
  [ -n "$url" ] || url=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
                         awk '{print $2}' | grep -v -- '-security' | head -n 1 || true)
  [ -n "$url" ] || { echo "build-image: no Debian mirror in the apt sources; set AUTOCLUSTERS_DEBIAN_MIRROR" >&2; exit 1; }
  echo "$url"
}

inputs_digest() { # everything that goes into the image
  (cd "$root" && find autoclusters policies image Containerfile pyproject.toml requirements.txt tools/build-image.sh \
     -type f ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1
}

build() {
  [ "$(id -u)" = 0 ] || { echo "build-image: needs root (chroot, file ownership)" >&2; exit 1; }
  deps
  [ -x "$py" ] || { echo "build-image: no $py (run make venv)" >&2; exit 1; }
  local version image archive digest
  version=$("$py" -c 'import autoclusters; print(autoclusters.__version__)')
  image=$("$py" -c 'from autoclusters.deploy import DEFAULT_IMAGE; print(DEFAULT_IMAGE)')
  archive="$out/autoclusters-$version.oci.tar"
  digest=$(inputs_digest)
  if [ -f "$archive" ] && [ "$(cat "$out/inputs.sha256" 2>/dev/null)" = "$digest" ]; then
    log "$archive is up to date ($image)"
    return 0
  fi
  mkdir -p "$out"

  local base="$out/base-$suite"
  if [ ! -f "$base/.complete" ]; then
    log "base root filesystem: debootstrap --variant=minbase --include=python3 $suite (cached after this)"
    rm -rf "$base"
    debootstrap --variant=minbase --include=python3 "$suite" "$base/rootfs" "$(mirror)" >"$out/debootstrap.log" 2>&1 ||
      { tail -n 20 "$out/debootstrap.log" >&2; exit 1; }
    touch "$base/.complete"
    log "base root filesystem done"
  fi

  # The dependency wheels change only with the pins; the autoclusters wheel with every change.
  local deps_key only=""
  deps_key=$(cat "$root/requirements.txt" "$root/pyproject.toml" "$root/image/wheelhouse.sh" "$root/image/install.sh" | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$out/wheels/.deps.sha256" 2>/dev/null)" = "$deps_key" ]; then
    only=--package-only
    log "wheelhouse: the autoclusters wheel (dependency wheels cached)"
  else
    rm -rf "$out/wheels"
    log "wheelhouse: the autoclusters wheel and its pinned runtime dependencies"
  fi
  "$root/image/wheelhouse.sh" "$root" "$out/wheels" "$py" $only >"$out/wheelhouse.log" 2>&1 ||
    { tail -n 20 "$out/wheelhouse.log" >&2; exit 1; }
  echo "$deps_key" >"$out/wheels/.deps.sha256"

  log "root filesystem: install into /opt/autoclusters (chroot), slim"
  local rootfs="$out/rootfs"
  rm -rf "$rootfs"
  cp -a "$base/rootfs" "$rootfs"
  mkdir -p "$rootfs/tmp/build"
  cp "$out/wheels"/*.whl "$root/image/install.sh" "$rootfs/tmp/build/"
  local in_root=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 chroot "$rootfs")
  "${in_root[@]}" sh /tmp/build/install.sh venv /tmp/build
  "${in_root[@]}" sh /tmp/build/install.sh slim
  rm -rf "$rootfs/tmp/build" "$rootfs/tmp/"* "$rootfs/dev/"* "$rootfs/root/.cache"

  log "OCI image: umoci (one layer), config, archive"
  local layout="$out/layout" tag=${image##*:}
  rm -rf "$layout"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci insert --image "$layout:$tag" "$rootfs" /
  umoci config --image "$layout:$tag" \
    --config.entrypoint /opt/autoclusters/bin/autoclusters \
    --config.user 65532:65532 --config.workingdir / \
    --config.env PATH=/opt/autoclusters/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONUNBUFFERED=1 --config.env LANG=C.UTF-8 \
    --config.label "org.opencontainers.image.title=autoclusters" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.ref.name=$image" \
    --history.created_by "tools/build-image.sh (debootstrap $suite minbase + python3, image/install.sh)"
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  echo "$digest" >"$out/inputs.sha256"
  rm -rf "$layout" "$rootfs"
  log "$archive ($(du -m "$archive" | cut -f1) MB compressed): $image"
}

case ${1:-build} in
  build) build ;;
  deps) deps ;;
  *) echo "usage: $0 [build|deps]" >&2; exit 2 ;;
esac
