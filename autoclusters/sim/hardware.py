"""Simulated GPU hardware for kwok nodes: one spool directory per node.

Layout of ``<spool>/<node>/``::

    kmsg              the node's kernel log for the current boot (/dev/kmsg records)
    dcgm.json         what ``dcgmi health -c -j`` prints now
    sys/class/infiniband/mlx5_<n>/ports/1/{state,phys_state,counters/*}
    persistent.json   injected faults that model broken hardware: they return at every boot
    generation        changes with every change to DCGM or the ports (lets a fleet skip unchanged nodes)
    .lock             serialises injectors and the agent's reboot handling

``inject-fault`` writes here exactly what the real part would show (a driver line in the
kernel log, a failed DCGM watch, a port that went down); the simulated detector reads
it through the same sources a real node uses. At a new boot the kernel log starts
empty, DCGM and the ports are healthy again, and every persistent fault is replayed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoclusters.api import DriverRecoveryAction
from autoclusters.detector.dcgm import health_output, parse_health
from autoclusters.detector.infiniband import ACTIVE_STATE, ERROR_COUNTERS, LINK_UP
from autoclusters.detector.kernel_log import format_sxid_line, format_xid_line, kmsg_record
from autoclusters.detector.pci import SIMULATED_GPU_BUS_IDS
from autoclusters.faults.catalog import Catalog, FaultClass
from autoclusters.faults.recovery import XID_RECOVERY_ACTION, recovery_line_text

SPOOL_ENV = "AUTOCLUSTERS_DETECTOR_SPOOL"
SIMULATED_HCAS = 4
PORT_DOWN_STATE = "1: DOWN"
PORT_DOWN_PHYS = "3: Disabled"
NVSWITCH_BUS_IDS = ("0000:c4:00", "0000:c5:00", "0000:c6:00", "0000:c7:00", "0000:c8:00", "0000:c9:00")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st.st_ino, st.st_mtime_ns)


class SimulatedHardware:
    def __init__(self, spool: str | Path, node: str) -> None:
        if not node or "/" in node or node.startswith("."):
            raise ValueError(f"invalid node name {node!r}")
        self.dir = Path(spool) / node
        self.node = node

    @property
    def kmsg(self) -> Path:
        return self.dir / "kmsg"

    @property
    def dcgm_json(self) -> Path:
        return self.dir / "dcgm.json"

    @property
    def ib_root(self) -> Path:
        return self.dir / "sys" / "class" / "infiniband"

    @property
    def generation_file(self) -> Path:
        return self.dir / "generation"

    def _bump(self) -> None:
        _atomic_write(self.generation_file, f"{time.time_ns()}\n")

    def generation(self) -> tuple[int, int]:
        """Changes whenever the ports may read differently (inject, clear, reboot)."""
        return _stamp(self.generation_file)

    def dcgm_stamp(self) -> tuple[int, int]:
        """Changes whenever ``dcgm.json`` is rewritten, by this class or by hand."""
        return _stamp(self.dcgm_json)

    @property
    def persistent_file(self) -> Path:
        return self.dir / "persistent.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # --- healthy hardware --------------------------------------------------------------
    def ensure(self) -> None:
        """Creates a healthy node's files where they are missing."""
        with self.locked():
            self._ensure()

    def _ensure(self) -> None:
        if not self.kmsg.exists():
            self.kmsg.touch()
        if not self.dcgm_json.exists():
            _atomic_write(self.dcgm_json, health_output([]))
        for i in range(SIMULATED_HCAS):
            port = self.ib_root / f"mlx5_{i}" / "ports" / "1"
            if not (port / "state").exists():
                self._set_port(f"mlx5_{i}", "1", up=True)
                for counter in ERROR_COUNTERS:
                    _atomic_write(port / "counters" / counter, "0\n")
        if not self.generation_file.exists():
            self._bump()

    def _set_port(self, hca: str, port: str, *, up: bool) -> None:
        base = self.ib_root / hca / "ports" / port
        _atomic_write(base / "state", (ACTIVE_STATE if up else PORT_DOWN_STATE) + "\n")
        _atomic_write(base / "phys_state", (LINK_UP if up else PORT_DOWN_PHYS) + "\n")

    # --- persistent faults ---------------------------------------------------------------
    def _persistent(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.persistent_file.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def _remember(self, fault: dict[str, Any]) -> None:
        faults = [f for f in self._persistent() if f != fault] + [fault]
        _atomic_write(self.persistent_file, json.dumps(faults, indent=1))

    # --- injection ---------------------------------------------------------------------
    def _append_kmsg(self, text: str) -> str:
        seq = self.kmsg.stat().st_size if self.kmsg.exists() else 0
        line = kmsg_record(seq, int(time.monotonic() * 1e6), text)
        with open(self.kmsg, "a") as f:
            f.write(line + "\n")
        return line

    def _apply(self, fault: dict[str, Any], catalog: Catalog) -> str:
        kind = fault["kind"]
        if kind == "xid":
            entry = catalog.entry_or_unknown(FaultClass.GPU, fault["code"])
            bus = SIMULATED_GPU_BUS_IDS[fault["gpu"] % len(SIMULATED_GPU_BUS_IDS)]
            text = fault.get("text") or (recovery_line_text(DriverRecoveryAction.NODE_REBOOT)
                                         if str(fault["code"]) == XID_RECOVERY_ACTION else f"{entry.name}.")
            return self._append_kmsg(format_xid_line(bus, fault["code"], text))
        if kind == "sxid":
            entry = catalog.entry_or_unknown(FaultClass.NVSWITCH, fault["code"])
            switch = fault.get("switch", 0)
            bus = NVSWITCH_BUS_IDS[switch % len(NVSWITCH_BUS_IDS)]
            return self._append_kmsg(format_sxid_line(switch, bus, fault["code"], fault.get("text") or entry.name,
                                                      fatal=fault.get("fatal", True)))
        if kind == "dcgm":
            incidents = self._dcgm_incidents()
            incidents = [i for i in incidents if (i[0], i[1]) != (fault["gpu"], fault["code"])]
            incidents.append((fault["gpu"], fault["code"], fault.get("text") or "injected by autoclusters"))
            _atomic_write(self.dcgm_json, health_output(incidents))
            return f"dcgm.json: GPU {fault['gpu']} {fault['code']}"
        if kind == "hca":
            if not (self.ib_root / fault["hca"] / "ports" / str(fault["port"]) / "state").exists():
                raise ValueError(f"node {self.node} has no InfiniBand port {fault['hca']} port {fault['port']}")
            self._set_port(fault["hca"], str(fault["port"]), up=False)
            return f"{fault['hca']} port {fault['port']}: {PORT_DOWN_STATE}"
        raise ValueError(f"unknown fault kind {kind!r}")

    def _dcgm_incidents(self) -> list[tuple[int, str, str]]:
        try:
            found = parse_health(self.dcgm_json.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [(g if g is not None else 0, c, m) for g, c, m in found]

    def inject(self, fault: dict[str, Any], catalog: Catalog, *, persistent: bool = False) -> str:
        """Makes the hardware show ``fault``; returns what was written. Persistent faults return each boot."""
        with self.locked():
            self._ensure()
            if persistent:
                self._remember(fault)
            written = self._apply(fault, catalog)
            self._bump()
            return written

    def clear(self) -> None:
        """Healthy again: DCGM and ports report healthy, no fault returns at the next boot.

        Kernel log lines cannot be taken back; their faults end with the next reboot.
        """
        with self.locked():
            self._ensure()
            _atomic_write(self.dcgm_json, health_output([]))
            for hca in sorted(p.name for p in self.ib_root.iterdir()):
                for port in sorted(p.name for p in (self.ib_root / hca / "ports").iterdir()):
                    self._set_port(hca, port, up=True)
            with contextlib.suppress(FileNotFoundError):
                self.persistent_file.unlink()
            self._bump()

    def reboot(self, catalog: Catalog) -> None:
        """A new boot: a fresh kernel log, healthy DCGM and ports, then the persistent faults again."""
        with self.locked():
            self._ensure()
            _atomic_write(self.kmsg, "")
            _atomic_write(self.dcgm_json, health_output([]))
            for hca in sorted(p.name for p in self.ib_root.iterdir()):
                for port in sorted(p.name for p in (self.ib_root / hca / "ports").iterdir()):
                    self._set_port(hca, port, up=True)
            for fault in self._persistent():
                try:
                    self._apply(fault, catalog)
                except (KeyError, TypeError, ValueError):
                    continue  # a hand-edited entry that does not make sense is skipped
            self._bump()
