"""A pool's repair slots: its records in progress and the reservations of starts on their way."""

from __future__ import annotations

import threading

from autoclusters.controller.repair_slots import RepairSlots


def test_slots_count_records_in_progress_and_reservations_once_each() -> None:
    busy = {"a": {"r1", "r2"}}
    slots = RepairSlots(threading.RLock(), lambda pool: busy.get(pool, set()))
    assert slots.in_progress("a") == 2 and slots.in_progress("b") == 0
    slots.reserve("a", "r3")
    slots.reserve("a", "r1")  # a start whose record write has landed: counted once
    assert slots.in_progress("a") == 3
    assert slots.in_progress("a", exclude="r3") == 2  # the repair asking does not count itself
    slots.unreserve("a", "r3")
    assert slots.in_progress("a") == 2 and busy["a"] == {"r1", "r2"}  # the index's set is not changed
    slots.reserve("b", "r9")
    assert slots.in_progress("b") == 1 and slots.in_progress("a") == 2  # per pool
