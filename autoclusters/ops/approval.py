"""Approving proposed repairs: add ``<domain>/maintenance-approved=true`` where, and only where, it is due.

A node is due when it carries ``<domain>/maintenance-required=true``. The approval is a
JSON merge patch that names only that label plus the resourceVersion just read, so it
never overwrites a concurrent writer and fails (409) if the node changed in between; the
node is then read again and judged afresh. A node whose fault cleared in the meantime is
*done*, not an error: either the required label is gone when we read, or the admission
layer rejects the approval saying the node no longer needs a repair (the rule the
reference approval script relies on).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from autoclusters.kube import Conflict, Kube, KubeError, NotFound, Unavailable
from autoclusters.names import Names
from autoclusters.ops import resources as res

JSON = dict[str, Any]
T = TypeVar("T")

PARALLEL_APPROVALS = 8

# The admission rule's message for an approval of a node that has nothing left to repair.
CLEARED_REJECTION = "no longer needs a repair"


class ApprovalStatus(StrEnum):
    APPROVED = "approved"  # we added the label
    ALREADY_APPROVED = "already-approved"  # someone (or an earlier run) had added it
    NOT_NEEDED = "not-needed"  # the fault cleared or the node never needed a repair: done
    WOULD_APPROVE = "would-approve"  # dry run: due, left alone
    NOT_FOUND = "not-found"  # no such node
    FAILED = "failed"  # the API server refused for another reason

    @property
    def done(self) -> bool:
        """Nothing left to do for this node: a script may carry on."""
        return self in {ApprovalStatus.APPROVED, ApprovalStatus.ALREADY_APPROVED, ApprovalStatus.NOT_NEEDED,
                        ApprovalStatus.WOULD_APPROVE}


@dataclass(frozen=True)
class ApprovalResult:
    node: str
    pool: str
    status: ApprovalStatus
    message: str

    def to_dict(self) -> JSON:
        return {"node": self.node, "pool": self.pool or None, "status": self.status.value,
                "done": self.status.done, "message": self.message}


@dataclass(frozen=True)
class PoolApproval:
    pool: str
    exists: bool  # a GpuNodePool object or at least one node labelled with the pool
    results: list[ApprovalResult]


def approval_state(node: JSON, names: Names) -> ApprovalStatus | None:
    """What approving this node would mean, judged from the node alone; None: it is due."""
    labels = res.labels_of(node)
    if labels.get(names.maintenance_required) != "true":
        return ApprovalStatus.NOT_NEEDED
    if labels.get(names.maintenance_approved) == "true":
        return ApprovalStatus.ALREADY_APPROVED
    return None


def is_cleared_rejection(error: KubeError) -> bool:
    """The admission layer said the node's fault already cleared (webhook or CEL policy)."""
    return CLEARED_REJECTION in str(error).lower()


def approval_patch(names: Names, resource_version: str) -> JSON:
    """The whole write: one label, guarded by the resourceVersion that was judged."""
    return {"metadata": {"resourceVersion": resource_version, "labels": {names.maintenance_approved: "true"}}}


def approve_node(kube: Kube, names: Names, node: str, *, dry_run: bool = False, attempts: int = 5) -> ApprovalResult:
    """Approves one node if it needs it. Raises only ``Unavailable`` (the cluster cannot be reached)."""
    pool_of, _ = res.pool_reader(res.list_pools(kube, names), names)
    return _approve(kube, names, node, None, pool_of, dry_run=dry_run, attempts=attempts)


def _approve(kube: Kube, names: Names, node: str, seen: JSON | None, pool_of: Callable[[JSON], str], *,
             dry_run: bool, attempts: int = 5) -> ApprovalResult:
    """``seen``: the node as a list just returned it, judged first; a conflict reads it afresh.
    ``pool_of``: the membership rule over the cluster's pools (``res.pool_reader``)."""
    pool = ""
    for _ in range(attempts):
        if seen is None:
            try:
                seen = kube.get_node(node)
            except NotFound:
                return ApprovalResult(node, pool, ApprovalStatus.NOT_FOUND, "no such node")
        obj, seen = seen, None
        pool = pool_of(obj)
        state = approval_state(obj, names)
        if state == ApprovalStatus.NOT_NEEDED:
            return ApprovalResult(node, pool, state, f"{names.maintenance_required} is not set: nothing to approve")
        if state == ApprovalStatus.ALREADY_APPROVED:
            return ApprovalResult(node, pool, state, "already approved")
        if dry_run:
            return ApprovalResult(node, pool, ApprovalStatus.WOULD_APPROVE, "needs a repair; not approved (dry run)")
        rv = str(obj["metadata"].get("resourceVersion", ""))
        try:
            kube.patch_node(node, approval_patch(names, rv))
        except Conflict:
            continue  # the node changed since we read it: judge it again
        except NotFound:
            return ApprovalResult(node, pool, ApprovalStatus.NOT_FOUND, "the node was deleted")
        except Unavailable:
            raise
        except KubeError as e:
            if is_cleared_rejection(e):
                return ApprovalResult(node, pool, ApprovalStatus.NOT_NEEDED, f"the fault cleared: {e}")
            return ApprovalResult(node, pool, ApprovalStatus.FAILED, str(e))
        return ApprovalResult(node, pool, ApprovalStatus.APPROVED, f"added {names.maintenance_approved}=true")
    return ApprovalResult(node, pool, ApprovalStatus.FAILED,
                          f"the node kept changing; gave up after {attempts} attempts")


def approve_nodes(kube: Kube, names: Names, nodes: list[str], *, dry_run: bool = False) -> list[ApprovalResult]:
    """Approves each node (duplicates once), a few at a time; results in the order given."""
    unique = list(dict.fromkeys(nodes))
    pool_of, _ = res.pool_reader(res.list_pools(kube, names), names)
    return _in_parallel(lambda n: _approve(kube, names, n, None, pool_of, dry_run=dry_run), unique)


def pool_members_needing_repair(kube: Kube, names: Names,
                                pool: str) -> tuple[bool, list[JSON], Callable[[JSON], str]]:
    """Whether the pool exists, its nodes that carry the required label (sorted by name), and the
    membership rule they were judged by."""
    pools = res.list_pools(kube, names)
    pool_of, _ = res.pool_reader(pools, names)  # every pool: another pool's selector may claim a node
    due = kube.list_nodes(label_selector=f"{names.maintenance_required}=true")
    members = sorted((n for n in due if pool_of(n) == pool), key=lambda n: n["metadata"]["name"])
    exists = any(p["metadata"]["name"] == pool for p in pools or []) or bool(members)
    if not exists:
        with contextlib.suppress(NotFound):
            page = kube.request("GET", "/api/v1/nodes", query={"labelSelector": f"{names.pool_label}={pool}",
                                                                "limit": 1})
            exists = bool(page.get("items"))
    return exists, members, pool_of


def approve_pool(kube: Kube, names: Names, pool: str, *, dry_run: bool = False) -> PoolApproval:
    """Approves every node of ``pool`` that needs a repair; the others are left alone.

    The nodes are judged as the list returned them (one request), then patched with that
    resourceVersion; only a node that changed in between is read again.
    """
    exists, members, pool_of = pool_members_needing_repair(kube, names, pool)
    results = _in_parallel(lambda n: _approve(kube, names, str(n["metadata"]["name"]), n, pool_of, dry_run=dry_run),
                           members)
    return PoolApproval(pool, exists, results)


def _in_parallel(fn: Callable[[T], ApprovalResult], items: list[T]) -> list[ApprovalResult]:
    """A few approvals at once: a pool of hundreds of due nodes is approved in seconds, not minutes.
    ``Unavailable`` from any of them propagates."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_APPROVALS, len(items))) as ex:
        return list(ex.map(fn, items))
