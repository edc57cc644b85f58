"""The per-pool circuit breaker: a pure function with hysteresis.

It opens when more than ``openAbovePercent`` of the pool's nodes report a fault at once
(a fleet-wide cause: driver, firmware, fabric) and closes by itself only when the share
falls below ``closeBelowPercent``; between the two it keeps its state, so a pool hovering
at the threshold does not flap. Pools smaller than ``minNodes`` never open it, and neither
does a single faulty node (one fault is never a fleet-wide cause: without this rule every
pool of fewer than four nodes would pause its first repair).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoclusters.api import BreakerState

OPEN, CLOSED = BreakerState.OPEN, BreakerState.CLOSED
MIN_FAULTY = 2


@dataclass(frozen=True)
class BreakerReading:
    state: str
    nodes: int
    faulty: int

    @property
    def percent(self) -> int:
        return (self.faulty * 100) // self.nodes if self.nodes else 0


def next_state(current: str, nodes: int, faulty: int, *, open_above: int, close_below: int,
               min_nodes: int = 0) -> BreakerReading:
    share = (faulty * 100.0 / nodes) if nodes else 0.0
    if current == OPEN:
        state = CLOSED if share < close_below else OPEN
    else:
        state = OPEN if nodes >= max(min_nodes, 1) and faulty >= MIN_FAULTY and share > open_above else CLOSED
    return BreakerReading(state, nodes, faulty)
