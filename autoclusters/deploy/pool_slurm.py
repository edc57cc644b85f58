"""``GpuNodePool.spec.slurm``: how the Slurm bridge treats a pool's nodes.

Parsed strictly here (unknown keys and bad values fail with the field named), written out
with every default by ``slurm_spec``, and described for the API server by ``slurm_schema``;
the defaults live in ``SlurmPolicy`` only, and a unit test checks the three agree.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# Signals a job may be sent before its requeue (names as scancel takes them, without SIG).
SIGNALS = ("TERM", "USR1", "USR2", "INT", "HUP", "QUIT")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class SignalTarget(enum.StrEnum):
    """Which processes of a job get the signal (scancel's scopes)."""

    STEPS = "steps"  # every job step (srun), not the batch shell: scancel --signal=SIG JOB
    BATCH = "batch"  # the batch shell only: scancel --batch --signal=SIG JOB
    ALL = "all"  # the batch shell, its children and every step: scancel --full --signal=SIG JOB


class SlurmSpecError(ValueError):
    """A bad ``spec.slurm``; the message names the field."""


@dataclass(frozen=True)
class SlurmPolicy:
    """The bridge's settings for one pool; field names mirror ``spec.slurm`` in snake case."""

    enabled: bool = False
    node_name_label: str = ""  # the Slurm node's name is this node label's value ...
    node_name_annotation: str = ""  # ... or this annotation's; default: the Kubernetes node's name
    signal: str = "TERM"  # sent to the node's jobs when the drain starts; "" = none (requeue only)
    signal_to: SignalTarget = SignalTarget.STEPS
    signal_lead_seconds: int = 60  # from the signal to the requeue (bounded by the drain deadline)
    requeue: bool = True
    act_on_external_drains: bool = False  # cordon the node while someone else drains its Slurm node

    def check(self, where: str) -> None:
        for value, label in ((self.enabled, "enabled"), (self.requeue, "requeue"),
                             (self.act_on_external_drains, "actOnExternalDrains")):
            if not isinstance(value, bool):
                raise SlurmSpecError(f"{where}: slurm.{label} must be true or false, got {value!r}")
        if self.node_name_label and self.node_name_annotation:
            raise SlurmSpecError(f"{where}: slurm.nodeName takes one of fromLabel or fromAnnotation")
        for key, label in ((self.node_name_label, "fromLabel"), (self.node_name_annotation, "fromAnnotation")):
            if key and (not isinstance(key, str) or not _KEY.match(key)):
                raise SlurmSpecError(f"{where}: slurm.nodeName.{label} {key!r} is not a label/annotation key")
        if self.signal not in ("", *SIGNALS):
            raise SlurmSpecError(f"{where}: slurm.signal must be one of {', '.join(SIGNALS)} or \"\" (none), "
                                 f"got {self.signal!r}")
        if self.signal_to not in set(SignalTarget):
            raise SlurmSpecError(f"{where}: slurm.signalTo must be one of "
                                 f"{'|'.join(t.value for t in SignalTarget)}, got {self.signal_to!r}")
        lead = self.signal_lead_seconds
        if not isinstance(lead, int) or isinstance(lead, bool) or lead < 0:
            raise SlurmSpecError(f"{where}: slurm.signalLeadSeconds must be an integer >= 0, got {lead!r}")

    def slurm_node_name(self, node: Mapping[str, Any]) -> str | None:
        """The Slurm node a Kubernetes node maps to; None when the mapping's key is missing."""
        meta = node.get("metadata") or {}
        if self.node_name_label:
            return ((meta.get("labels") or {}).get(self.node_name_label)) or None
        if self.node_name_annotation:
            return ((meta.get("annotations") or {}).get(self.node_name_annotation)) or None
        return str(meta.get("name") or "") or None


_KEYS = {"enabled", "nodeName", "signal", "signalTo", "signalLeadSeconds", "requeue", "actOnExternalDrains"}


def slurm_from_config(data: Any, where: str) -> SlurmPolicy:
    """Parses ``spec.slurm`` (camelCase); raises SlurmSpecError naming the field."""
    if not isinstance(data, Mapping):
        raise SlurmSpecError(f"{where}: slurm must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SlurmSpecError(f"{where}: slurm: unknown key(s) {', '.join(unknown)}; "
                             f"allowed: {', '.join(sorted(_KEYS))}")
    mapping = data.get("nodeName") or {}
    if not isinstance(mapping, Mapping) or set(mapping) - {"fromLabel", "fromAnnotation"}:
        raise SlurmSpecError(f"{where}: slurm.nodeName takes fromLabel or fromAnnotation, got {mapping!r}")
    d = SlurmPolicy()
    policy = SlurmPolicy(
        enabled=data.get("enabled", d.enabled),
        node_name_label=mapping.get("fromLabel", ""),
        node_name_annotation=mapping.get("fromAnnotation", ""),
        signal=data.get("signal", d.signal),
        signal_to=data.get("signalTo", d.signal_to),
        signal_lead_seconds=data.get("signalLeadSeconds", d.signal_lead_seconds),
        requeue=data.get("requeue", d.requeue),
        act_on_external_drains=data.get("actOnExternalDrains", d.act_on_external_drains),
    )
    policy.check(where)
    return replace(policy, signal_to=SignalTarget(policy.signal_to))


def slurm_spec(policy: SlurmPolicy) -> dict[str, Any]:
    """``spec.slurm`` with every default written out."""
    spec: dict[str, Any] = {"enabled": policy.enabled, "signal": policy.signal,
                            "signalTo": SignalTarget(policy.signal_to).value,
                            "signalLeadSeconds": policy.signal_lead_seconds, "requeue": policy.requeue,
                            "actOnExternalDrains": policy.act_on_external_drains}
    if policy.node_name_label:
        spec["nodeName"] = {"fromLabel": policy.node_name_label}
    elif policy.node_name_annotation:
        spec["nodeName"] = {"fromAnnotation": policy.node_name_annotation}
    return spec


def slurm_schema() -> dict[str, Any]:
    """The OpenAPI schema of ``spec.slurm`` (defaults from ``SlurmPolicy``)."""
    d = SlurmPolicy()
    return {
        "type": "object", "default": {},
        "description": "The Slurm bridge: drain, signal, requeue and resume the Slurm node of each node.",
        "properties": {
            "enabled": {"type": "boolean", "default": d.enabled},
            "nodeName": {"type": "object",
                         "properties": {"fromLabel": {"type": "string"}, "fromAnnotation": {"type": "string"}},
                         "description": "Where the Slurm node's name is; default: the Kubernetes node's name.",
                         "x-kubernetes-validations": [{
                             "rule": "!(has(self.fromLabel) && has(self.fromAnnotation))",
                             "message": "nodeName takes one of fromLabel or fromAnnotation"}]},
            "signal": {"type": "string", "enum": ["", *SIGNALS], "default": d.signal,
                       "description": "Signal sent to the node's jobs when the drain starts (\"\": none)."},
            "signalTo": {"type": "string", "enum": [t.value for t in SignalTarget], "default": d.signal_to.value},
            "signalLeadSeconds": {"type": "integer", "minimum": 0, "default": d.signal_lead_seconds,
                                  "description": "Time between the signal and the requeue."},
            "requeue": {"type": "boolean", "default": d.requeue},
            "actOnExternalDrains": {"type": "boolean", "default": d.act_on_external_drains,
                                    "description": "Cordon the node while an admin or a health check drains "
                                                   "its Slurm node; default: report only."},
        },
    }
