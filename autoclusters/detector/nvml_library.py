"""Finding the driver's ``libnvidia-ml.so.1`` for ``pynvml`` (search order: ``deploy/nvml_reach.py``).

``pynvml`` loads the library by its soname alone (``CDLL("libnvidia-ml.so.1")``), so it finds
only what the dynamic loader's path holds. To use a library found elsewhere (the GPU
Operator's driver root, the host's library directories through the host mount), the file is
loaded first by its full path: glibc's ``dlopen`` then answers the later soname lookup with
the object already loaded, whose ``DT_SONAME`` matches (tests/unit/detector/test_nvml_stub.py
checks this with a library that is only under such a directory).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoclusters.deploy.nvml_reach import LIBRARY, LIBRARY_DIRS, LOADER


@dataclass(frozen=True)
class Found:
    """Where the library came from (``path``: the file, or ``loader``), or every place tried
    (the loader's path, and each root of the search as seen in here)."""

    path: str | None
    tried: tuple[str, ...]
    errors: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.path is not None:
            return f"{LIBRARY} from {self.path}"
        why = (f"no {LIBRARY} in reach: tried {', '.join(self.tried) or 'nothing'} "
               f"(each root in {', '.join(LIBRARY_DIRS)})")
        return why + (f"; {'; '.join(self.errors)}" if self.errors else "")


def _under(root: str, path: str) -> str:
    return os.path.normpath(os.path.join(root, path.lstrip("/"))) if root not in ("", "/") else path


def _resolve(host_root: str, path: str) -> str:
    """``path`` with its absolute symlinks followed inside the host root (a link to
    ``/usr/lib/...`` on the host means ``<host root>/usr/lib/...`` in here)."""
    for _ in range(16):
        if not os.path.islink(path):
            return path
        target = os.readlink(path)
        path = _under(host_root, target) if target.startswith("/") else os.path.join(os.path.dirname(path), target)
    return path


def candidates(search: Sequence[str], host_root: str) -> list[str]:
    """The files to try, in order: ``loader`` stays as is, every host directory is expanded
    with the usual library directories under ``host_root`` (where the host's ``/`` is)."""
    out: list[str] = []
    for entry in search:
        if entry == LOADER:
            out.append(LOADER)
            continue
        out += [_under(host_root, os.path.join(entry, d, LIBRARY)) for d in LIBRARY_DIRS]
    return out


def preload(search: Sequence[str], host_root: str,
            dlopen: Callable[[str], object] | None = None) -> Found:
    """Loads the first library of ``candidates`` that exists and loads (``RTLD_GLOBAL``)."""
    load = dlopen or (lambda p: ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL))
    tried: list[str] = []
    errors: list[str] = []
    for entry in search:
        tried.append("the loader's path" if entry == LOADER else _under(host_root, entry))
        for path in candidates([entry], host_root):
            if path == LOADER:
                try:
                    load(LIBRARY)
                except OSError:
                    continue
                return Found(LOADER, tuple(tried))
            if not os.path.lexists(path):
                continue
            try:
                load(_resolve(host_root, path))
            except OSError as e:
                errors.append(f"{path}: {e}")
                continue
            return Found(path, tuple(tried))
    return Found(None, tuple(tried), tuple(errors))
