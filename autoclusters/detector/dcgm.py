"""DCGM health watches, read with ``dcgmi health -c -j`` when DCGM is installed.

A snapshot source: the command reports the incidents that hold now, so an incident that
is gone clears its fault. ``dcgmi`` missing means DCGM is not installed: the source is
off. ``dcgmi`` present but failing (host engine down, bad output) is the agent's own
health problem, never a GPU fault.

The JSON nests entities and systems under ``body`` with ``children`` and ``value``
nodes, and its layout has changed between DCGM releases, so the parser does not depend
on one layout: it walks the tree, tracks the GPU an entry belongs to (``GPU ID: 5`` keys
or ``gpuId``/``entityId`` fields) and takes the failure code from a ``DCGM_FR_*`` name
in the text or, for releases that print only the human message, from the message
templates of DCGM's error table below.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from autoclusters.detector.source_records import Poll, Record
from autoclusters.faults.catalog import Catalog, FaultClass

_FR_CODE = re.compile(r"\b(DCGM_FR_[A-Z0-9_]{1,64})\b")
_GPU_KEY = re.compile(r"^\s*GPU(?: ID)?[: ]\s*(\d{1,3})\s*$", re.IGNORECASE)
# The start of DCGM's own message for each failure (dcgm_errors.h), for output without codes.
_TEMPLATES = (
    (re.compile(r"NvLink link \d+ is currently down", re.IGNORECASE), "DCGM_FR_NVLINK_DOWN"),
    (re.compile(r"NvLink errors on GPU \d+'s link \d+ which exceeds threshold", re.IGNORECASE),
     "DCGM_FR_NVLINK_ERROR_CRITICAL"),
    (re.compile(r"volatile double-bit ECC error", re.IGNORECASE), "DCGM_FR_VOLATILE_DBE_DETECTED"),
    (re.compile(r"single-bit ECC error\(s\) detected", re.IGNORECASE), "DCGM_FR_VOLATILE_SBE_DETECTED"),
    (re.compile(r"row remapping failed", re.IGNORECASE), "DCGM_FR_ROW_REMAP_FAILURE"),
    (re.compile(r"row remapping is pending", re.IGNORECASE), "DCGM_FR_PENDING_ROW_REMAP"),
    (re.compile(r"retired pages exceeds", re.IGNORECASE), "DCGM_FR_RETIRED_PAGES_LIMIT"),
    (re.compile(r"Detected XID \d+ for GPU", re.IGNORECASE), "DCGM_FR_XID_ERROR"),
    (re.compile(r"GPU \d+ (?:has fallen off the bus|is lost)", re.IGNORECASE), "DCGM_FR_GPU_LOST"),
    (re.compile(r"PCIe replay", re.IGNORECASE), "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION"),
    (re.compile(r"thermal violations", re.IGNORECASE), "DCGM_FR_THERMAL_VIOLATIONS"),
)
_HEALTHY = {"healthy", "pass", "ok"}
_MAX_DEPTH = 12
_MAX_ITEMS = 4096


def _code_of(text: str) -> str | None:
    m = _FR_CODE.search(text)
    if m:
        return m.group(1)
    for pattern, code in _TEMPLATES:
        if pattern.search(text):
            return code
    return None


def _walk(node: Any, gpu: int | None, depth: int, budget: list[int]) -> Iterator[tuple[int | None, str, str]]:
    if depth > _MAX_DEPTH or budget[0] <= 0:
        return
    budget[0] -= 1
    if isinstance(node, dict):
        for k in ("gpuId", "entityId", "gpu_id"):
            v = node.get(k)
            if isinstance(v, int) and 0 <= v < 1000:
                gpu = v
        if str(node.get("value", "")).strip().lower() in _HEALTHY and "children" not in node:
            return
        for key, child in list(node.items())[:256]:
            m = _GPU_KEY.match(str(key))
            yield from _walk(child, int(m.group(1)) if m else gpu, depth + 1, budget)
    elif isinstance(node, list):
        for child in node[:256]:
            yield from _walk(child, gpu, depth + 1, budget)
    elif isinstance(node, str) and len(node) < 4096:
        code = _code_of(node)
        if code:
            yield gpu, code, node[:256]


def parse_health(text: str) -> list[tuple[int | None, str, str]]:
    """``(gpu index or None, DCGM_FR code, message)`` for every incident; raises ValueError on bad JSON."""
    data = json.loads(text)
    if not isinstance(data, dict | list):
        raise ValueError("dcgmi output is not a JSON object")
    seen: dict[tuple[int | None, str], str] = {}
    for gpu, code, msg in _walk(data, None, 0, [_MAX_ITEMS]):
        seen.setdefault((gpu, code), msg)
    return [(g, c, m) for (g, c), m in seen.items()]


class DcgmSource:
    """Runs ``dcgmi health -c -j`` (or reads a file with its output, for simulated nodes)."""

    name = "dcgm"

    def __init__(self, catalog: Catalog, *, command: tuple[str, ...] = ("dcgmi", "health", "-c", "-j"),
                 output_file: str | None = None, timeout_s: float = 20.0) -> None:
        self.catalog = catalog
        self.command = command
        self.output_file = output_file
        self.timeout_s = timeout_s

    def _read(self) -> str | None:
        if self.output_file is not None:
            try:
                with open(self.output_file) as f:
                    return f.read(1 << 20)
            except FileNotFoundError:
                return None
        if shutil.which(self.command[0]) is None:
            return None
        proc = subprocess.run(self.command, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        if proc.returncode != 0:
            raise OSError(f"{' '.join(self.command)} exited {proc.returncode}: {proc.stderr.strip()[:200]}")
        return proc.stdout

    def poll(self) -> Poll:
        try:
            text = self._read()
        except (OSError, subprocess.SubprocessError) as e:
            return Poll(self.name, error=f"cannot read DCGM health: {e}")
        if text is None:
            return Poll(self.name, snapshot=True)  # DCGM not installed: off
        try:
            incidents = parse_health(text)
        except (ValueError, RecursionError) as e:
            return Poll(self.name, error=f"cannot parse DCGM health output: {str(e)[:200]}")
        records = []
        for gpu, code, msg in incidents:
            entry = self.catalog.entry_or_unknown(FaultClass.DCGM, code)
            subject = f"GPU {gpu}" if gpu is not None else "DCGM"
            records.append(Record(self.name, FaultClass.DCGM, code, subject, entry.severity, entry.name,
                                  self.catalog.lookup(FaultClass.DCGM, code) is not None, msg))
        return Poll(self.name, tuple(records), snapshot=True)


def health_output(incidents: list[tuple[int, str, str]]) -> str:
    """A ``dcgmi health -c -j`` style document with the given incidents (simulated nodes)."""
    gpus: dict[str, Any] = {}
    for gpu, code, message in incidents:
        gpus.setdefault(f"GPU ID: {gpu}", {"children": {}})["children"][code] = {
            "children": {"Health": {"value": "Failure"}, "Error": {"value": f"{code}: {message}"}}}
    overall = "Failure" if incidents else "Healthy"
    return json.dumps({"body": {"Overall Health": {"value": overall}, "GPU": {"children": gpus}}}, indent=1)
