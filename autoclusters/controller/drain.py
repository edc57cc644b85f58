"""Which pods a drain removes, following kubectl drain's rules.

DaemonSet pods stay (their controller would recreate them on the cordoned node anyway)
and so do mirror pods (the kubelet owns them; the API cannot delete them). Everything
else is evicted through the Eviction API, which honours PodDisruptionBudgets (a 429 means
"not now": retried on the next pass) and each pod's own termination grace period. After
the deadline what is left is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def is_daemonset_pod(pod: dict[str, Any]) -> bool:
    return any(ref.get("kind") == "DaemonSet" and ref.get("controller")
               for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def is_mirror_pod(pod: dict[str, Any]) -> bool:
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def drainable(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not is_daemonset_pod(p) and not is_mirror_pod(p)]


def opted_out(pods: Iterable[dict[str, Any]], label: str) -> bool:
    return any(((p.get("metadata") or {}).get("labels") or {}).get(label) == "disabled" for p in pods)


@dataclass(frozen=True)
class DrainPass:
    evicted: int = 0
    blocked: int = 0  # refused by a PodDisruptionBudget (429), retried next pass
    deleted: int = 0
    terminating: int = 0
