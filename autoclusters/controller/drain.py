"""Which pods a drain removes, following kubectl drain's rules.

DaemonSet pods stay (their controller would recreate them on the cordoned node anyway)
and so do mirror pods (the kubelet owns them; the API cannot delete them). Everything
else is evicted through the Eviction API, which honours PodDisruptionBudgets (a 429 means
"not now": retried on the next pass) and each pod's own termination grace period. After
the deadline what is left is deleted (``at_deadline``: with the pod's own grace period, or
at once when that grace has already run out).

Slinky (slurmd in pods): slurm-operator mirrors the Slurm node's state onto its slurmd pod
as pod conditions ``SlurmNodeState<State>`` (base states Allocated, Mixed, Idle, ... and
flags Drain, Completing, Undrain, ...). A slurmd pod is evicted only once Slurm has drained
it (``Drain`` true, ``Undrain`` not, and none of ``Allocated``/``Mixed``/``Completing``):
the same reading slurm-operator uses for "drained" versus "draining".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoclusters.clock import parse_iso
from autoclusters.names import SLINKY_STATE_PREFIX

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
SLINKY_API_GROUP = "slinky.slurm.net"
_SLURM_BUSY = ("Allocated", "Mixed", "Completing")


def is_daemonset_pod(pod: dict[str, Any]) -> bool:
    return any(ref.get("kind") == "DaemonSet" and ref.get("controller")
               for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_mirror_pod(pod: dict[str, Any]) -> bool:
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def drainable(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not is_daemonset_pod(p) and not is_mirror_pod(p)]


def opted_out(pods: Iterable[dict[str, Any]], label: str) -> bool:
    return any(((p.get("metadata") or {}).get("labels") or {}).get(label) == "disabled" for p in pods)


def _true_conditions(pod: dict[str, Any]) -> set[str]:
    return {c.get("type", "") for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def is_slurmd_pod(pod: dict[str, Any]) -> bool:
    """A Slinky slurmd pod: owned by a NodeSet, or carrying the Slurm node-state conditions."""
    owned = any(ref.get("kind") == "NodeSet" and str(ref.get("apiVersion", "")).startswith(f"{SLINKY_API_GROUP}/")
                for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])
    return owned or any(str(c.get("type", "")).startswith(SLINKY_STATE_PREFIX)
                        for c in (pod.get("status") or {}).get("conditions") or [])


def slurm_drained(pod: dict[str, Any]) -> bool:
    """Slurm has drained this slurmd pod's node: DRAIN set, not being undrained, no job left."""
    true = _true_conditions(pod)
    drain = f"{SLINKY_STATE_PREFIX}Drain" in true and f"{SLINKY_STATE_PREFIX}Undrain" not in true
    return drain and not any(f"{SLINKY_STATE_PREFIX}{s}" in true for s in _SLURM_BUSY)


def held_for_slurm(pod: dict[str, Any]) -> bool:
    """Not evicted yet: a slurmd pod whose Slurm node is not drained (busy, or not yet draining)."""
    return is_slurmd_pod(pod) and not slurm_drained(pod)


class DeadlineStep(enum.StrEnum):
    DELETE = "delete"  # delete with the pod's own terminationGracePeriodSeconds
    WAIT = "wait"  # already terminating within its grace period: let it finish (its checkpoint)
    DELETE_NOW = "delete-now"  # its grace period ran out and it is still there: grace 0


def at_deadline(pod: dict[str, Any], now: datetime) -> DeadlineStep:
    """What the drain does with a pod still there at the reset/replace deadline.

    A pod is never cut short inside the grace period its owner declared for saving its
    state: one not yet terminating is deleted with its own grace period (SIGTERM, then the
    kubelet waits that long); one already terminating is left to finish. Only a pod whose
    grace period has run out (``deletionTimestamp`` passed: the kubelet did not remove it,
    e.g. the node is broken) is deleted with grace 0.
    """
    ends = parse_iso((pod.get("metadata") or {}).get("deletionTimestamp"))
    if ends is None:
        return DeadlineStep.DELETE
    return DeadlineStep.DELETE_NOW if now >= ends else DeadlineStep.WAIT


def warned_for(pod: dict[str, Any], remediation_key: str) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(remediation_key, ""))


def wait_acks(pods: Iterable[dict[str, Any]], wait_label: str, ack_key: str) -> tuple[tuple[str, str], ...]:
    """For each pod labelled ``<wait_label>=true``: ("namespace/name", the record its ack names)."""
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if (meta.get("labels") or {}).get(wait_label) == "true" and not meta.get("deletionTimestamp"):
            out.append((f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                        str((meta.get("annotations") or {}).get(ack_key, ""))))
    return tuple(sorted(out))


@dataclass(frozen=True)
class DrainPass:
    evicted: int = 0
    blocked: int = 0  # refused by a PodDisruptionBudget (429), retried next pass
    deleted: int = 0
    terminating: int = 0
    held: int = 0  # slurmd pods whose Slurm node is not drained yet
