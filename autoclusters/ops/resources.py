"""Reading the two custom resources (``GpuNodePool``, ``Remediation``) and matching nodes to pools.

The operator tools must work on a cluster where the CRDs are not installed yet (a fresh
cluster, or one where only the detector runs), so a missing kind is an answer here
(``None``), not an error: the callers say so and show what the nodes alone tell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoclusters.deploy import API_VERSION
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.objects import selector_matches
from autoclusters.names import Names

JSON = dict[str, Any]

POOL_PLURAL = "gpunodepools"
REMEDIATION_PLURAL = "remediations"


def pools_path(names: Names, name: str | None = None) -> str:
    return Kube.custom_path(names.api_group, API_VERSION, POOL_PLURAL, name)


def remediations_path(names: Names, name: str | None = None) -> str:
    return Kube.custom_path(names.api_group, API_VERSION, REMEDIATION_PLURAL, name)


def list_pools(kube: Kube, names: Names) -> list[JSON] | None:
    """Every ``GpuNodePool``, or None when the kind is not served (CRD not installed)."""
    try:
        return kube.list(pools_path(names))
    except NotFound:
        return None


def get_pool(kube: Kube, names: Names, name: str) -> JSON | None:
    """One pool object; None when it (or its CRD) does not exist."""
    try:
        return kube.get(pools_path(names, name))
    except NotFound:
        return None


def list_remediations(kube: Kube, names: Names) -> list[JSON] | None:
    """Every ``Remediation`` record, or None when the kind is not served (CRD not installed)."""
    try:
        return kube.list(remediations_path(names))
    except NotFound:
        return None


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def pool_selector(pool: Mapping[str, Any], names: Names) -> JSON:
    """The pool's label selector: ``spec.nodeSelector``, or the pool label equal to the pool's name."""
    sel = (pool.get("spec") or {}).get("nodeSelector")
    if sel:
        return dict(sel)
    return {"matchLabels": {names.pool_label: (pool.get("metadata") or {}).get("name", "")}}


def node_pool(node: Mapping[str, Any], pools: list[JSON], names: Names) -> str:
    """The pool a node belongs to: the first pool object whose selector matches, else its pool label."""
    labels = labels_of(node)
    for pool in pools:
        if selector_matches(pool_selector(pool, names), labels):
            return str(pool["metadata"]["name"])
    return labels.get(names.pool_label, "")
