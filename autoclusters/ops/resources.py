"""Reading the two custom resources (``GpuNodePool``, ``Remediation``) and placing nodes in pools.

The operator tools must work on a cluster where the CRDs are not installed yet (a fresh
cluster, or one where only the detector runs), so a missing kind is an answer here
(``None``), not an error: the callers say so and show what the nodes alone tell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autoclusters import api
from autoclusters.kube import Forbidden, Kube, NotFound
from autoclusters.names import Names
from autoclusters.pools import default_pool
from autoclusters.pools.membership import Membership

JSON = dict[str, Any]

POOL_PLURAL = api.POOLS.plural
REMEDIATION_PLURAL = api.REMEDIATIONS.plural


def pools_path(names: Names, name: str | None = None) -> str:
    return Kube.custom_path(names.api_group, api.VERSION, POOL_PLURAL, name)


def remediations_path(names: Names, name: str | None = None) -> str:
    return Kube.custom_path(names.api_group, api.VERSION, REMEDIATION_PLURAL, name)


def list_pools(kube: Kube, names: Names) -> list[JSON] | None:
    """Every ``GpuNodePool``, or None when the kind is not served (CRD not installed)."""
    try:
        return kube.list_items(pools_path(names))
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
        return kube.list_items(remediations_path(names))
    except NotFound:
        return None


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def get_default_policy(kube: Kube, namespace: str) -> JSON | None:
    """The cluster default policy's ConfigMap (``pools.default_pool``), or None."""
    try:
        return kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{default_pool.CONFIGMAP}")
    except (NotFound, Forbidden):
        return None


def pool_reader(pools: list[JSON] | None, names: Names, *, default: bool = False
                ) -> tuple[Callable[[Mapping[str, Any]], str], dict[str, str]]:
    """How the operator tools place a node in a pool, and the pool objects the controller ignores.

    With pool objects, the controller's own rule (``pools.membership``): "" for a node in no
    pool; an invalid pool (error by name in the second value) selects nothing. Without the
    GpuNodePool CRD (``pools`` None) nothing is decided by a controller, so the pool label is
    shown as it is. ``default``: a cluster default policy is in force (a label naming no pool
    makes a pool under it).
    """
    if pools is None:
        return (lambda node: labels_of(node).get(names.pool_label, "")), {}
    membership, invalid = Membership.from_objects(pools, names, default=default)
    return (lambda node: membership.pool_of(node) or ""), invalid
