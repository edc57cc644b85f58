"""The neutral contract between fault sources and the rest of the agent.

Sources know nothing of Kubernetes: they turn what they read (a kernel log line, an NVML
answer, a sysfs file) into ``Record``s and say whether they could read at all
(``Poll``). The tracker, the condition renderer and the writer build on these alone, so
each source can be tested with recorded inputs and no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from autoclusters.faults.catalog import FaultClass, Severity


class Record(NamedTuple):
    """One fault a source saw.

    ``subject`` names the part that failed in the words the condition message uses
    ("GPU 3", "NVSwitch", "HCA mlx5_0 port 1"); together with class and code it is the
    identity of the fault, so repeats of the same fault are one fault.
    """

    source: str
    fault_class: FaultClass
    code: str
    subject: str
    severity: Severity
    name: str
    known: bool = True
    detail: str = ""

    # A named tuple rather than a frozen dataclass: a driver storm makes many of these, and
    # building a tuple costs a fraction of a frozen dataclass's __init__.
    @property
    def key(self) -> tuple[str, str, str]:
        return (str(self.fault_class), self.code, self.subject)


@dataclass(frozen=True)
class Poll:
    """The result of reading one source once.

    ``snapshot`` sources (NVML, DCGM, InfiniBand) report every fault that is active now,
    so a fault missing from a readable snapshot has recovered. Log sources report only
    new lines: silence says nothing about recovery. ``error`` set means the source could
    not be read; its faults then stay as they were and nothing new is concluded.
    """

    source: str
    records: tuple[Record, ...] = field(default=())
    snapshot: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class SourceStatus(StrEnum):
    """Whether the agent reads a source: every source of a node is in one of these, and says which."""

    ON = "on"  # read at every poll of its interval
    OFF = "off"  # turned off by configuration (a flag or stack setting said so)
    UNAVAILABLE = "unavailable"  # wanted, but what it needs is not on this node (``SourceState.reason`` says what)


@dataclass(frozen=True)
class SourceState:
    """A source's state and, unless it is on, why (``"no libnvidia-ml.so.1 in /run/nvidia/driver/..."``).

    ``expected``: the node's hardware implies the source (NVML on a node whose driver lists
    GPUs), so ``UNAVAILABLE`` is a blind spot to warn about, not a legitimate absence.
    """

    status: SourceStatus
    reason: str = ""
    expected: bool = False
