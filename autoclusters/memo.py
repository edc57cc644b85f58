"""Answers kept per object, for objects that are replaced and never changed in place (what the
informers' stores hold, a repair's states and their steps): a reconcile asks the same question
of the same object again and again, and the answer is worked out once.

An answer is keyed by the object's identity and holds the object, so the identity cannot be
reused by another object while the answer is kept. The memo is bounded: when full it is cleared
and the answers are worked out again. Safe across threads under the GIL (a race at most works
an answer out twice).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ObjectMemo(Generic[V]):
    def __init__(self, limit: int) -> None:
        self._kept: dict[tuple[int, Hashable], tuple[object, V]] = {}
        self._limit = limit

    def get(self, obj: object, work_out: Callable[[], V], part: Hashable = None,
            still: Callable[[V], bool] | None = None) -> V:
        """The answer kept for ``obj`` (and ``part``: one object, several questions), else
        ``work_out()``, kept. ``still``: whether a kept answer still holds (it may depend on
        more than the object)."""
        key = (id(obj), part)
        hit = self._kept.get(key)
        if hit is not None and hit[0] is obj and (still is None or still(hit[1])):
            return hit[1]
        value = work_out()
        if len(self._kept) >= self._limit:
            self._kept.clear()
        self._kept[key] = (obj, value)
        return value

    def __len__(self) -> int:
        return len(self._kept)
