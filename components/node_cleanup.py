"""``NodeCleanup``: ``pulumi destroy`` takes every mark of ours off the nodes, as a Pulumi dynamic resource.

Creating it does nothing. Deleting it runs ``autoclusters.ops.uninstall`` (what
``autoclusters uninstall`` runs): the labels, taint, annotations and conditions of ours go, and a
cordon goes where autoclusters cordoned. The ordering is the stack's dependencies: the
controller, the detector and the admission depend on this resource, so ``pulumi destroy``
deletes them first, and this resource depends on the CRDs and the namespace, which it reads
(the Remediation records say whose cordon it is) and which are deleted after it. Pulumi
deletes a Deployment or DaemonSet without waiting for its pods, so the delete also waits (up to
``wait_seconds``) until no pod of theirs and no live controller Lease is left.

Something it must not undo (a node whose reset or replacement is under way, or whose repair
failed, stays cordoned) makes the delete fail with one line per leftover and the command that
removes it, so ``pulumi destroy`` stops before the CRDs and the namespace go: once they are dealt
with, ``pulumi destroy`` again finishes. (A dynamic provider has no engine to log to, so the error
is how the message reaches the user.)

It runs in Pulumi's dynamic-provider process, which imports this module by name (the
repository root must be on ``PYTHONPATH``, as for ``components/simulated_node.py``).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic as dyn

DEFAULT_WAIT_SECONDS = 300.0


class _NodeCleanupProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        return dyn.CreateResult(id_=f"node-cleanup-{props['namespace']}", outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return dyn.DiffResult(changes=olds != news, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs=news)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        from autoclusters.kube import load_kube
        from autoclusters.names import Names
        from autoclusters.ops.uninstall import uninstall

        kube = load_kube(props.get("kubeconfig") or None, user_agent="autoclusters-uninstall")
        report = uninstall(kube, Names(props["domain"], props["prefix"]), props["namespace"],
                           wait_seconds=float(props.get("wait_seconds") or DEFAULT_WAIT_SECONDS))
        if report.left:
            raise RuntimeError("autoclusters left these on the nodes, which it could not remove safely:\n"
                               + "\n".join(x.line() for x in report.left)
                               + "\nDeal with them, then run `pulumi destroy` again.")


class NodeCleanup(dyn.Resource):
    """Deleting it takes autoclusters' marks off every node (``autoclusters.ops.uninstall``)."""

    def __init__(self, resource_name: str, *, namespace: str, domain: str, prefix: str, kubeconfig: str | None,
                 wait_seconds: float = DEFAULT_WAIT_SECONDS, opts: pulumi.ResourceOptions | None = None) -> None:
        props = {"namespace": namespace, "domain": domain, "prefix": prefix, "kubeconfig": kubeconfig or "",
                 "wait_seconds": wait_seconds}
        super().__init__(_NodeCleanupProvider(), resource_name, props, opts)
