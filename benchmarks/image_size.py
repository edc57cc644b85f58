"""What the runtime image weighs and what its build takes (docs/benchmarks/deploy.md).

    python benchmarks/image_size.py            # build if needed (warm), then weigh the archive
    python benchmarks/image_size.py --cold     # remove build/image first (base root filesystem too)

Prints the build time, the archive's size (compressed layer), the unpacked size, and the
unpacked bytes per part of the root filesystem (the Python packages one by one), read from
the layer itself.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autoclusters import __version__  # noqa: E402

IMAGE_DIR = Path(os.environ.get("AUTOCLUSTERS_IMAGE_DIR", REPO / "build" / "image"))


def part(name: str) -> str:
    p = name.lstrip("./")
    if p.startswith("opt/autoclusters/lib/"):
        rest = p.split("/site-packages/", 1)
        if len(rest) == 2:
            return "site-packages/" + rest[1].split("/", 1)[0].split("-")[0]
    for prefix in ("usr/lib/python3", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/share",
                   "usr/bin", "usr/sbin", "usr/lib", "var", "etc", "opt/autoclusters"):
        if p.startswith(prefix):
            return prefix.rstrip("/") + "/"
    return p.split("/", 1)[0] + "/"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="remove build/image (the cached base too) first")
    ap.add_argument("--top", type=int, default=14, help="parts to list (default 14)")
    args = ap.parse_args()
    if args.cold:
        shutil.rmtree(IMAGE_DIR, ignore_errors=True)
    start = time.monotonic()
    subprocess.run([str(REPO / "tools" / "build-image.sh")], check=True,
                   env={**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)})
    took = time.monotonic() - start
    archive = IMAGE_DIR / f"autoclusters-{__version__}.oci.tar"
    sizes: collections.Counter[str] = collections.Counter()
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("./index.json") or outer.extractfile("index.json"))  # type: ignore[arg-type]
        manifest_digest = index["manifests"][0]["digest"].split(":", 1)[1]
        manifest = json.load(outer.extractfile(f"./blobs/sha256/{manifest_digest}"))  # type: ignore[arg-type]
        layers = manifest["layers"]
        for layer in layers:
            blob = outer.extractfile(f"./blobs/sha256/{layer['digest'].split(':', 1)[1]}")
            with tarfile.open(fileobj=blob, mode="r|*") as inner:
                for member in inner:
                    if member.isfile():
                        sizes[part(member.name)] += member.size
    total = sum(sizes.values())
    compressed = sum(layer["size"] for layer in layers)
    print(f"build: {took:.1f}s ({'cold' if args.cold else 'as found'})")
    print(f"archive: {archive.stat().st_size / 1e6:.1f} MB ({len(layers)} layer(s), {compressed / 1e6:.1f} MB "
          f"compressed); unpacked files: {total / 1e6:.1f} MB")
    for name, size in sizes.most_common(args.top):
        print(f"  {size / 1e6:7.1f} MB  {name}")
    rest = total - sum(s for _, s in sizes.most_common(args.top))
    print(f"  {rest / 1e6:7.1f} MB  (everything else)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
