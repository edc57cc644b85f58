"""PCI bus ids and the GPU index an operator knows a GPU by.

The driver names a GPU in Xid lines by its PCI address (``PCI:0000:3b:00``); operators,
``nvidia-smi`` and the condition message use the index. NVML gives the exact mapping;
without it the GPUs the driver lists under ``/proc/driver/nvidia/gpus`` are numbered in
PCI bus order, the order ``nvidia-smi`` uses by default; an operator may also give the
mapping in configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# domain:bus:device[.function]; the domain is 4 to 8 hex digits: NVML writes 8, the driver
# ``%04x`` (at least 4: a VMD or Hyper-V domain such as 10000 or 7a4e1 has 5).
_PCI_RE = re.compile(r"^(?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?$")

# The bus ids of the eight GPUs of an HGX A100 / H100 baseboard, in index order. The
# simulated nodes use them so injected kernel log lines look like a real node's.
SIMULATED_GPU_BUS_IDS = ("0000:07:00", "0000:0f:00", "0000:47:00", "0000:4e:00",
                         "0000:87:00", "0000:90:00", "0000:b7:00", "0000:bd:00")


def normalize(bus_id: str) -> str | None:
    """``domain:bus:device`` in lower case with the domain in at least 4 digits (as the driver
    prints it), or None if not a bus id."""
    m = _PCI_RE.match(bus_id.strip())
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2).lower()}:{m.group(3).lower()}"


class GpuIndex:
    """Maps a normalised PCI bus id to the GPU index."""

    def __init__(self, by_bus: Mapping[str, int] | None = None) -> None:
        self._by_bus: dict[str, int] = {}
        for bus, idx in (by_bus or {}).items():
            key = normalize(bus)
            if key is not None:
                self._by_bus[key] = int(idx)

    def __len__(self) -> int:
        return len(self._by_bus)

    def index_of(self, bus_id: str) -> int | None:
        key = normalize(bus_id)
        return None if key is None else self._by_bus.get(key)

    def subject(self, bus_id: str) -> str:
        """``GPU 3``, or ``GPU PCI:0000:3b:00`` when the index is not known."""
        idx = self.index_of(bus_id)
        if idx is not None:
            return f"GPU {idx}"
        return f"GPU PCI:{normalize(bus_id) or bus_id}"

    @classmethod
    def in_bus_order(cls, bus_ids: Iterable[str]) -> GpuIndex:
        keys = sorted({k for k in (normalize(b) for b in bus_ids) if k is not None})
        return cls({k: i for i, k in enumerate(keys)})

    @classmethod
    def from_proc(cls, root: str | Path = "/proc/driver/nvidia/gpus") -> GpuIndex:
        """The GPUs the driver lists (one directory per bus id), numbered in bus order."""
        path = Path(root)
        try:
            names = [p.name for p in path.iterdir() if p.is_dir()]
        except OSError:
            return cls()
        return cls.in_bus_order(names)

    @classmethod
    def simulated(cls) -> GpuIndex:
        return cls({bus: i for i, bus in enumerate(SIMULATED_GPU_BUS_IDS)})
