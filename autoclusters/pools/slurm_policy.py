"""``GpuNodePool.spec.slurm``: how the Slurm bridge treats a pool's nodes.

Its settings (``enabled``, ``signal``, ...) are rows of the pool's field table
(``autoclusters/pool_fields.py``), which the parser (``pools/pool_config.py`` checks them),
``slurm_spec`` and ``slurm_schema`` derive from; ``nodeName``, a choice between a label and
an annotation, is parsed and checked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoclusters import pool_fields
from autoclusters.api import SignalTarget as SignalTarget  # the bridge names it here

_KEY = re.compile(pool_fields.LABEL_KEY_PATTERN)


class SlurmSpecError(ValueError):
    """A bad ``spec.slurm``; the message names the field."""


@dataclass(frozen=True)
class SlurmPolicy:
    """The bridge's settings for one pool; field names mirror ``spec.slurm`` in snake case."""

    enabled: bool = pool_fields.SLURM_ENABLED.default
    node_name_label: str = ""  # the Slurm node's name is this node label's value ...
    node_name_annotation: str = ""  # ... or this annotation's; default: the Kubernetes node's name
    signal: str = pool_fields.SLURM_SIGNAL.default  # sent when the drain starts; "" = none (requeue only)
    signal_to: SignalTarget = pool_fields.SLURM_SIGNAL_TO.default
    signal_lead_seconds: int = pool_fields.SLURM_SIGNAL_LEAD_SECONDS.default  # bounded by the drain deadline
    requeue: bool = pool_fields.SLURM_REQUEUE.default
    act_on_external_drains: bool = pool_fields.SLURM_ACT_ON_EXTERNAL_DRAINS.default

    def check(self, where: str) -> None:
        """The ``nodeName`` mapping (the settings of the field table are checked with the pool's,
        ``pools/pool_config.py``)."""
        if self.node_name_label and self.node_name_annotation:
            raise SlurmSpecError(f"{where}: slurm.nodeName takes one of fromLabel or fromAnnotation")
        for key, label in ((self.node_name_label, "fromLabel"), (self.node_name_annotation, "fromAnnotation")):
            if key and (not isinstance(key, str) or not _KEY.match(key)):
                raise SlurmSpecError(f"{where}: slurm.nodeName.{label} {key!r} is not a label/annotation key")

    def slurm_node_name(self, node: Mapping[str, Any]) -> str | None:
        """The Slurm node a Kubernetes node maps to; None when the mapping's key is missing."""
        meta = node.get("metadata") or {}
        if self.node_name_label:
            return ((meta.get("labels") or {}).get(self.node_name_label)) or None
        if self.node_name_annotation:
            return ((meta.get("annotations") or {}).get(self.node_name_annotation)) or None
        return str(meta.get("name") or "") or None


_KEYS = set(pool_fields.keys_of("slurm"))


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
    if len(mapping) > 1:  # given, even empty (as the CRD counts them)
        raise SlurmSpecError(f"{where}: slurm.nodeName takes one of fromLabel or fromAnnotation")
    for label, key in mapping.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise SlurmSpecError(f"{where}: slurm.nodeName.{label} {key!r} is not a label/annotation key")
    policy = SlurmPolicy(**pool_fields.given(data, "slurm"), node_name_label=mapping.get("fromLabel", ""),
                         node_name_annotation=mapping.get("fromAnnotation", ""))
    policy.check(where)
    return policy


def slurm_spec(policy: SlurmPolicy) -> dict[str, Any]:
    """``spec.slurm`` with every default written out."""
    spec = pool_fields.spec_of(policy, "slurm")
    if policy.node_name_label:
        spec["nodeName"] = {"fromLabel": policy.node_name_label}
    elif policy.node_name_annotation:
        spec["nodeName"] = {"fromAnnotation": policy.node_name_annotation}
    return spec


def slurm_schema() -> dict[str, Any]:
    """The OpenAPI schema of ``spec.slurm`` (its settings from the field table)."""
    return {
        "type": "object", "default": {},
        "description": "The Slurm bridge: drain, signal, requeue and resume the Slurm node of each node.",
        "properties": {
            **{s.key: s.schema() for s in pool_fields.settings_of("slurm")},
            "nodeName": {"type": "object",
                         "properties": {k: {"type": "string", "pattern": pool_fields.LABEL_KEY_PATTERN}
                                        for k in ("fromLabel", "fromAnnotation")},
                         "description": "Where the Slurm node's name is; default: the Kubernetes node's name.",
                         "x-kubernetes-validations": [{
                             "rule": "!(has(self.fromLabel) && has(self.fromAnnotation))",
                             "message": "nodeName takes one of fromLabel or fromAnnotation"}]},
        },
    }
