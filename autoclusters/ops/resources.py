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


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes ``LabelSelector`` (matchLabels and matchExpressions) applied to a label set.

    A bare mapping without either key is read as matchLabels, the way pool objects written
    by hand often spell it.
    """
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            return False  # an operator we do not know matches nothing, as the API server would reject it
    return True


def node_pool(node: Mapping[str, Any], pools: list[JSON], names: Names) -> str:
    """The pool a node belongs to: the first pool object whose selector matches, else its pool label."""
    labels = labels_of(node)
    for pool in pools:
        if selector_matches(pool_selector(pool, names), labels):
            return str(pool["metadata"]["name"])
    return labels.get(names.pool_label, "")
