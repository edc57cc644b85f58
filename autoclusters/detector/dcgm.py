"""DCGM health watches, read with ``dcgmi health -c -j --host ADDR`` from a DCGM hostengine.

A snapshot source: the command reports the incidents that hold now, so an incident that
is gone clears its fault. The source is on when a hostengine address is configured
(``--dcgm-host``; the GPU Operator's ``nvidia-dcgm`` Service, port 5555): a pod has its own
network namespace, so ``dcgmi``'s default of localhost reaches no hostengine but one in the
pod. Without an address the source is off by configuration; with one but no ``dcgmi`` in
the image it is unavailable (docs/detector.md says how to build the image on NVIDIA's DCGM
base image). ``dcgmi`` failing (hostengine down, bad output) is the agent's own health
problem, never a GPU fault.

The JSON is what dcgmi's ``Health::GenerateOutputFromResponse`` writes through
``DcgmiOutputJson`` (NVIDIA/DCGM ``dcgmi/Health.cpp``, ``dcgmi/DcgmiOutput.cpp``): sections
under ``body``, each node a ``value`` and ``children``, long text cut into ``overflow``
lines of at most 54 characters::

    {"body": {"Overall Health": {"value": "Failure"},
              "GPU": {"children": {"1": {"value": "Failure", "children": {"Errors": {"children": {
                  "Memory system": {"value": "Failure",
                                    "overflow": ["Detected 2 volatile double-bit ECC error(s) in", "GPU 1."]}}}}}}}},
     "header": ["Health Monitor Report"]}

The entity's key is its id within its group (``GPU`` > ``1``: GPU 1). The message carries
no ``DCGM_FR_*`` name, so the failure code comes from DCGM's message templates
(``dcgmlib/dcgm_errors.h``) below; a ``DCGM_FR_*`` name in the text (the simulated nodes
write one) wins, and a Failure whose text matches no template is ``DCGM_FR_UNKNOWN``
(the catalog's default for an unknown DCGM code applies). Older releases keyed entities
``GPU ID: 5``, which is read too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from autoclusters.detector.source_records import Poll, Record, SourceState, SourceStatus
from autoclusters.faults.catalog import Catalog, FaultClass

DEFAULT_COMMAND = ("dcgmi", "health", "-c", "-j")
# The GPU Operator's hostengine: the nvidia-dcgm DaemonSet listens on 5555, behind the
# nvidia-dcgm Service with internalTrafficPolicy Local (NVIDIA/gpu-operator
# assets/state-dcgm/0500_service.yaml), so each node's detector reaches its own node's.
# ``--host`` takes ``ADDR`` or ``ADDR:PORT`` (dcgmConnect_v2 in dcgmlib/dcgm_agent.h; 5555 is
# DCGM_HE_PORT_NUMBER, the default).
GPU_OPERATOR_HOST = "nvidia-dcgm.gpu-operator.svc:5555"
UNKNOWN_CODE = "DCGM_FR_UNKNOWN"
_FR_CODE = re.compile(r"\b(DCGM_FR_[A-Z0-9_]{1,64})\b")
_GPU_KEY = re.compile(r"^\s*GPU(?: ID)?[: ]\s*(\d{1,3})\s*$", re.IGNORECASE)
_ENTITY_ID = re.compile(r"^\d{1,4}$")
# The start of DCGM's own message for each failure (dcgm_errors.h, the *_MSG macros).
_TEMPLATES = (
    (re.compile(r"NvLink link \d+ is currently down", re.IGNORECASE), "DCGM_FR_NVLINK_DOWN"),
    (re.compile(r"NvLink errors on GPU \d+'s NVLink \(should be 0\)", re.IGNORECASE), "DCGM_FR_NVLINK_ERROR_CRITICAL"),
    (re.compile(r"NvLink errors on GPU \d+'s NVLink which exceeds threshold", re.IGNORECASE),
     "DCGM_FR_NVLINK_ERROR_THRESHOLD"),
    (re.compile(r"volatile double-bit ECC error", re.IGNORECASE), "DCGM_FR_VOLATILE_DBE_DETECTED"),
    (re.compile(r"single-bit ECC error\(s\) detected", re.IGNORECASE), "DCGM_FR_VOLATILE_SBE_DETECTED"),
    (re.compile(r"row remapping failed", re.IGNORECASE), "DCGM_FR_ROW_REMAP_FAILURE"),
    (re.compile(r"row remappings are pending", re.IGNORECASE), "DCGM_FR_PENDING_ROW_REMAP"),
    (re.compile(r"or more retired pages have been detected", re.IGNORECASE), "DCGM_FR_RETIRED_PAGES_LIMIT"),
    (re.compile(r"Detected XID \d+ for GPU", re.IGNORECASE), "DCGM_FR_XID_ERROR"),
    (re.compile(r"GPU \d+ (?:has fallen off the bus|is lost)", re.IGNORECASE), "DCGM_FR_GPU_LOST"),
    (re.compile(r"PCIe replay", re.IGNORECASE), "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION"),
    (re.compile(r"thermal violations", re.IGNORECASE), "DCGM_FR_THERMAL_VIOLATIONS"),
)
_HEALTHY = {"healthy", "pass", "ok"}
_FAILED = {"failure"}  # a Warning that matches no template is left out: its weight is not known
_MAX_DEPTH = 12
_MAX_ITEMS = 4096


def _codes_of(text: str) -> list[str]:
    """Every failure ``text`` names: dcgmi joins a system's incidents with ", " into one text."""
    named = list(dict.fromkeys(_FR_CODE.findall(text)))
    return named or [code for pattern, code in _TEMPLATES if pattern.search(text)]


def _walk(node: Any, gpu: int | None, in_gpu_group: bool, depth: int,
          budget: list[int]) -> Iterator[tuple[int | None, str, str]]:
    if depth > _MAX_DEPTH or budget[0] <= 0:
        return
    budget[0] -= 1
    if isinstance(node, dict):
        for k in ("gpuId", "entityId", "gpu_id"):
            v = node.get(k)
            if isinstance(v, int) and 0 <= v < 1000:
                gpu = v
        health = str(node.get("value", "")).strip().lower()
        overflow = node.get("overflow")
        if isinstance(overflow, list) and overflow:
            # one incident's text, cut into lines by dcgmi: matched whole
            text = " ".join(str(line) for line in overflow[:64] if isinstance(line, str | int | float))[:2048]
            for code in _codes_of(text) or ([UNKNOWN_CODE] if health in _FAILED else []):
                yield gpu, code, text[:256]
        if health in _HEALTHY and "children" not in node:
            return
        for key, child in list(node.items())[:256]:
            if key == "overflow":
                continue
            skey = str(key)
            m = _GPU_KEY.match(skey)
            child_gpu = int(m.group(1)) if m else (int(skey) if in_gpu_group and _ENTITY_ID.match(skey) else gpu)
            # the ids under body > GPU > children are GPU ids; under other groups they are not
            child_in_group = skey == "GPU" or (skey == "children" and in_gpu_group)
            yield from _walk(child, child_gpu, child_in_group, depth + 1, budget)
    elif isinstance(node, list):
        for child in node[:256]:
            yield from _walk(child, gpu, False, depth + 1, budget)
    elif isinstance(node, str) and len(node) < 4096:
        for code in _codes_of(node):
            yield gpu, code, node[:256]


def parse_health(text: str) -> list[tuple[int | None, str, str]]:
    """``(gpu index or None, DCGM_FR code, message)`` for every incident; raises ValueError on bad JSON."""
    data = json.loads(text)
    if not isinstance(data, dict | list):
        raise ValueError("dcgmi output is not a JSON object")
    seen: dict[tuple[int | None, str], str] = {}
    for gpu, code, msg in _walk(data, None, False, 0, [_MAX_ITEMS]):
        seen.setdefault((gpu, code), msg)
    return [(g, c, m) for (g, c), m in seen.items()]


def dcgmi_command(base: tuple[str, ...], host: str | None) -> tuple[str, ...]:
    """``base`` aimed at the hostengine ``host`` (``dcgmi ... --host ADDR``), or ``base`` itself."""
    return (*base, "--host", host) if host else base


class DcgmSource:
    """Runs ``dcgmi health -c -j --host ADDR`` (or reads a file with its output, for simulated nodes).

    ``host`` None and no ``output_file``: no hostengine is configured and the source is off."""

    name = "dcgm"

    def __init__(self, catalog: Catalog, *, command: tuple[str, ...] = DEFAULT_COMMAND,
                 host: str | None = None, output_file: str | None = None, timeout_s: float = 20.0) -> None:
        self.catalog = catalog
        self.host = host
        self.command = dcgmi_command(command, host)
        self.output_file = output_file
        self.timeout_s = timeout_s

    def state(self) -> SourceState:
        if self.output_file is not None:
            return SourceState(SourceStatus.ON)
        if not self.host:
            return SourceState(SourceStatus.OFF, "no DCGM hostengine configured (--dcgm-host)")
        if shutil.which(self.command[0]) is None:
            # asked for, so its absence is a blind spot to warn about
            return SourceState(SourceStatus.UNAVAILABLE, f"no {self.command[0]} in the image (see docs/detector.md)",
                               expected=True)
        return SourceState(SourceStatus.ON)

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
            # dcgmi prints its errors ("Error: unable to establish a connection ...") on stdout
            said = (proc.stderr.strip() or proc.stdout.strip())[:200]
            raise OSError(f"{' '.join(self.command)} exited {proc.returncode}: {said}")
        return proc.stdout

    def poll(self) -> Poll:
        if self.state().status != SourceStatus.ON:
            return Poll(self.name, snapshot=True)
        try:
            text = self._read()
        except (OSError, subprocess.SubprocessError) as e:
            return Poll(self.name, error=f"cannot read DCGM health: {e}")
        if text is None:
            return Poll(self.name, snapshot=True)  # the simulated node has written nothing yet
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
    """A ``dcgmi health -c -j`` document with the given incidents, in dcgmi's layout (simulated
    nodes). The text starts with the code, so any code reads back, templated or not."""
    gpus: dict[str, Any] = {}
    for gpu, code, message in incidents:
        entity = gpus.setdefault(str(gpu), {"value": "Failure", "children": {"Errors": {"children": {}}}})
        entity["children"]["Errors"]["children"][code] = {"value": "Failure", "overflow": [f"{code}: {message}"]}
    body: dict[str, Any] = {"Overall Health": {"value": "Failure" if incidents else "Healthy"}}
    if gpus:
        body["GPU"] = {"children": gpus}
    return json.dumps({"body": body, "header": ["Health Monitor Report"]}, indent=3)
