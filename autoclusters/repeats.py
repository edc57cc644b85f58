"""Which unexpected errors are new, per key, for loops that must outlive their own bugs.

The detector's poll (``detector.node.NodeLoop``), the simulated fleet's poll of each node
(``sim.fleet``) and the Slurm bridge's polls and nodes (``slurm.bridge``) catch what they did
not expect, so one bug never ends them, and log it: with its traceback the first time, in one
line while the same error (its ``repr``) comes back at every poll, so a log is not flooded
with one traceback a second. A success forgets the key, and the next error is new again.
"""

from __future__ import annotations

from collections.abc import Iterable


class RepeatedErrors:
    def __init__(self) -> None:
        self._last: dict[str, str] = {}  # key -> the repr of the error its last attempt raised

    def is_new(self, key: str, error: BaseException) -> bool:
        """Records ``error`` for ``key``; True when its last attempt did not raise the same."""
        seen = repr(error)
        new = self._last.get(key) != seen
        self._last[key] = seen
        return new

    def succeeded(self, key: str) -> None:
        self._last.pop(key, None)

    def keep_only(self, keys: Iterable[str]) -> None:
        """Forgets every key not in ``keys`` (the nodes that are gone)."""
        kept = set(keys)
        for gone in set(self._last) - kept:
            del self._last[gone]
