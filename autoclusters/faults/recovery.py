"""Xid 154, "GPU recovery action changed": the driver names the recovery it needs.

The line, as NVIDIA's Xid Catalog quotes it: ``Xid 154 GPU recovery action changed from 0x0
(None) to 0x2 (Node Reboot Required)``; the values it lists are "None", "Drain P2P", "Drain
and Reset", "GPU Reset Required", "Node Reboot Required". Drivers word some values
differently ("0x2 (OS Reboot)", "0x1 (PF FLR)" are seen in the field), so the number after
``to`` decides, read as NVML's ``nvmlDeviceGpuRecoveryAction_t``; the words are a fallback.

The action decides the repair: none -> no repair; GPU reset, drain and reset and node reboot
-> the node reset (this product has no single-GPU reset yet). Drain P2P -> no repair: NVML's
documentation of the value says to quiesce peer-to-peer traffic and query again, when the
driver names one of the other actions (a later Xid 154). NVML's 5 (GPU_RESET_BUS, newer
drivers) is a GPU reset.
"""

from __future__ import annotations

import re

from autoclusters.api import CatalogAction, DriverRecoveryAction

XID_RECOVERY_ACTION = "154"
_BY_NUMBER = {0: DriverRecoveryAction.NONE, 1: DriverRecoveryAction.GPU_RESET, 2: DriverRecoveryAction.NODE_REBOOT,
              3: DriverRecoveryAction.DRAIN_P2P, 4: DriverRecoveryAction.DRAIN_AND_RESET,
              5: DriverRecoveryAction.GPU_RESET}
_BY_WORDS = {a.value.lower(): a for a in DriverRecoveryAction}
_TO = re.compile(r"\bto\s+0x([0-9a-fA-F]+)(?:\s*\(([^)]*)\))?")
_NAME_PREFIX = "GPU recovery action: "
_NAMED = re.compile(re.escape(_NAME_PREFIX) + r"([A-Za-z0-9 ]+)")


def parse_recovery_action(text: str) -> DriverRecoveryAction | None:
    """The action an Xid 154 line's text asks for, or None when it names none this module knows."""
    m = _TO.search(text)
    if m is None:
        return None
    found = _BY_NUMBER.get(int(m.group(1), 16))
    if found is None and m.group(2):
        found = _BY_WORDS.get(m.group(2).strip().lower())
    return found


def recovery_line_text(action: DriverRecoveryAction, before: DriverRecoveryAction = DriverRecoveryAction.NONE) -> str:
    """The text of an Xid 154 line as the Xid Catalog quotes it (fault injection writes it)."""
    number = {a: n for n, a in sorted(_BY_NUMBER.items(), reverse=True)}  # GPU reset: 1, not 5
    return (f"GPU recovery action changed from 0x{number[before]:x} ({before.value}) "
            f"to 0x{number[action]:x} ({action.value})")


def recovery_name(action: DriverRecoveryAction | None) -> str | None:
    """The record's name for Xid 154 with ``action`` (the condition message carries it in its
    parentheses); None: keep the catalog's name."""
    return None if action is None else f"{_NAME_PREFIX}{action.value}"


def action_from_name(text: str) -> CatalogAction:
    """The repair an Xid 154 condition message (or record name) asks for; none when it names no
    known action."""
    m = _NAMED.search(text)
    action = _BY_WORDS.get(m.group(1).strip().lower()) if m else None
    return repair_for(action)


def repair_for(action: DriverRecoveryAction | None) -> CatalogAction:
    if action is None or action in (DriverRecoveryAction.NONE, DriverRecoveryAction.DRAIN_P2P):
        return CatalogAction.NONE
    return CatalogAction.RESET
