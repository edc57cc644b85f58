"""A Secret volume as the kubelet lays it out, for a webhook that runs on this host (the local
cluster has no kubelet that mounts Secrets).

The layout and the update are the kubelet's AtomicWriter (kubernetes
``pkg/volume/util/atomic_writer.go``): the files live in a hidden timestamped directory, the
symlink ``..data`` points at it, and each key is a symlink ``<key> -> ..data/<key>``. An update
writes a new directory, points a temporary symlink at it and renames that over ``..data`` (one
atomic step for every key), then removes the old directory.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path


def write_secret_volume(directory: Path, data: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    data_link = directory / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    stamp = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for key, value in data.items():
        (stamp / key).write_bytes(value)
    tmp = directory / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp.name)
    os.replace(tmp, data_link)
    for key in data:
        link = directory / key
        if not link.is_symlink():
            link.symlink_to(f"..data/{key}")
    if old is not None:
        shutil.rmtree(directory / old, ignore_errors=True)
