#!/bin/sh
# Collects every wheel the runtime image installs into OUT: the autoclusters wheel built
# from SRC, its runtime dependencies and those of the extras install.sh installs (nvml:
# nvidia-ml-py) at the versions requirements.txt pins (only those the package declares: no
# Pulumi, no test tools), and pip's own wheel, which install.sh runs
# from the wheelhouse so that the image carries no pip.
#
# Usage: wheelhouse.sh SRC OUT [PYTHON] [--package-only]
#   --package-only   rebuild only the autoclusters wheel (the dependencies in OUT are kept)
# The wheels are chosen for the image's interpreter (Debian bookworm's CPython 3.11 on this
# machine's architecture), not for PYTHON, so a host with another Python gets the same set.
set -eu
src=$1 out=$2 py=${3:-python3} only=${4:-}
mkdir -p "$out"
rm -f "$out"/autoclusters-*.whl
# Built from a clean copy: an in-tree build would leave build/lib behind, and a module
# removed from the tree could linger there and end up in the next wheel.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src/pyproject.toml" "$src/README.md" "$tmp/"
cp -r "$src/autoclusters" "$src/policies" "$tmp/"   # autoclusters/policies links to ../policies
find "$tmp" -name __pycache__ -type d -prune -exec rm -rf {} +
"$py" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$tmp"
[ "$only" = --package-only ] && exit 0
wheel=$(ls "$out"/autoclusters-*.whl | tail -n 1)
arch=$(uname -m)
"$py" -m pip download --quiet --dest "$out" --only-binary=:all: \
  --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none \
  --platform "manylinux_2_36_$arch" --platform "manylinux_2_34_$arch" --platform "manylinux_2_28_$arch" \
  --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" --platform any \
  --constraint "$src/requirements.txt" "$wheel[$(sh "$src/image/install.sh" extras)]" pip
