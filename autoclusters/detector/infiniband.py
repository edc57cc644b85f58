"""InfiniBand HCAs and ports from sysfs (``/sys/class/infiniband/<hca>/ports/<n>/``).

A snapshot source: every poll reports the faults that hold now, so a port that comes
back up, or error counters that stop climbing, clear their fault. Rules:

* ``port_down``: a port that was ``4: ACTIVE`` / ``5: LinkUp`` since the agent started is
  no longer both. Ports that were never up (unused or unconnected) are not faults.
* ``hca_missing``: an HCA present at the first poll has disappeared.
* ``link_errors``: ``symbol_error``, ``link_downed`` or ``port_rcv_errors`` grew by more
  than the threshold within the counter window.

No ``/sys/class/infiniband`` at all means the node has no InfiniBand: the source is
unavailable, and not expected (nothing on the node implies InfiniBand).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

from autoclusters.clock import Clock
from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus
from autoclusters.faults.catalog import Catalog, FaultClass

ACTIVE_STATE = "4: ACTIVE"
LINK_UP = "5: LinkUp"
ERROR_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors")


@dataclass(frozen=True)
class InfinibandConfig:
    counter_thresholds: dict[str, int] = field(
        default_factory=lambda: {"symbol_error": 100, "link_downed": 2, "port_rcv_errors": 100})
    counter_window_s: float = 300.0


def _read(path: str) -> str:
    with open(path) as f:
        return f.read(256).strip()


class InfinibandSource:
    name = "infiniband"

    def __init__(self, catalog: Catalog, clock: Clock, root: str = "/sys/class/infiniband",
                 config: InfinibandConfig | None = None) -> None:
        self.catalog = catalog
        self.clock = clock
        self.root = root
        self.config = config or InfinibandConfig()
        self._known_hcas: set[str] | None = None
        self._was_up: set[tuple[str, str]] = set()
        self._history: dict[tuple[str, str, str], deque[tuple[float, int]]] = {}

    def state(self) -> SourceState:
        if not os.path.isdir(self.root):
            return SourceState(SourceStatus.UNAVAILABLE, f"no {self.root}: no InfiniBand on this node")
        return SourceState(SourceStatus.ON)

    def reset(self) -> None:
        """Forget what was seen (the node rebooted: its HCAs and ports start over)."""
        self._known_hcas, self._was_up, self._history = None, set(), {}

    def _record(self, code: str, subject: str, detail: str) -> Record:
        entry = self.catalog.entry_or_unknown(FaultClass.INTERCONNECT, code)
        return Record(self.name, FaultClass.INTERCONNECT, code, subject, entry.severity, entry.name,
                      self.catalog.lookup(FaultClass.INTERCONNECT, code) is not None, detail)

    def poll(self) -> Poll:
        if not os.path.isdir(self.root):
            return Poll(self.name, snapshot=True)
        now = self.clock.monotonic()
        records: list[Record] = []
        try:
            hcas = sorted(os.listdir(self.root))
            if self._known_hcas is None:
                self._known_hcas = set(hcas)
            for gone in sorted(self._known_hcas - set(hcas)):
                records.append(self._record("hca_missing", f"HCA {gone}", "no longer in sysfs"))
            for hca in hcas:
                ports_dir = os.path.join(self.root, hca, "ports")
                if not os.path.isdir(ports_dir):
                    continue
                for port in sorted(os.listdir(ports_dir)):
                    records.extend(self._port(hca, port, os.path.join(ports_dir, port), now))
        except OSError as e:
            return Poll(self.name, error=f"cannot read {e.filename or self.root}: {e.strerror}")
        except ValueError as e:
            return Poll(self.name, error=f"unexpected content under {self.root}: {e}")
        return Poll(self.name, tuple(records), snapshot=True)

    def _port(self, hca: str, port: str, path: str, now: float) -> list[Record]:
        out: list[Record] = []
        state = _read(os.path.join(path, "state"))
        phys = _read(os.path.join(path, "phys_state"))
        subject = f"HCA {hca} port {port}"
        up = state == ACTIVE_STATE and phys == LINK_UP
        if up:
            self._was_up.add((hca, port))
        elif (hca, port) in self._was_up:
            out.append(self._record("port_down", subject, f"state {state!r}, phys_state {phys!r}"))
        for counter in ERROR_COUNTERS:
            cpath = os.path.join(path, "counters", counter)
            if not os.path.exists(cpath):
                continue
            value = int(_read(cpath) or "0")
            hist = self._history.setdefault((hca, port, counter), deque())
            if hist and value < hist[-1][1]:
                hist.clear()  # counters were reset
            hist.append((now, value))
            while len(hist) > 1 and now - hist[0][0] > self.config.counter_window_s:
                hist.popleft()
            limit = self.config.counter_thresholds.get(counter)
            if limit is not None and value - hist[0][1] > limit:
                out.append(self._record("link_errors", subject, f"{counter} grew by {value - hist[0][1]}"))
                break
        return out
