"""The agent's settings; the durations of docs/contract.md are defaults here and tests shorten them here."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoclusters import api
from autoclusters.detector.infiniband import InfinibandConfig
from autoclusters.detector.writer import WriterConfig


@dataclass(frozen=True)
class AgentConfig:
    window_s: float = api.PERSISTENCE_WINDOW_SECONDS  # a fault must stay active this long before it counts
    poll_s: float = 1.0  # kernel log
    snapshot_poll_s: float = 10.0  # NVML, DCGM, InfiniBand
    writer: WriterConfig = field(default_factory=WriterConfig)
    infiniband: InfinibandConfig = field(default_factory=InfinibandConfig)
    # "<class>:<code>" keys whose warnings and infos raise the fault condition too, so a pool
    # that names them in spec.repairCodes can repair them (docs/operations.md)
    condition_codes: frozenset[str] = frozenset()
