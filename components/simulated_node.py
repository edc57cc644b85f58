"""``SimulatedGpuNode``: one kwok GPU node, as a Pulumi dynamic resource.

A Node's capacity is dropped when the Node is created, and the Kubernetes provider has no
resource that writes ``nodes/status``; so a dynamic provider does what the test fixtures
do (``autoclusters.sim.nodes.create_gpu_node``): create the node, then patch its status.
It runs in Pulumi's dynamic-provider process, which imports this module by name (the
repository root must be on ``PYTHONPATH``; ``autoclusters.devcluster.pulumi_env`` sets it).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pulumi
import pulumi.dynamic as dyn

# Inputs whose change means a different node: the provider replaces it.
_REPLACE_ON = ("name", "pool", "domain", "prefix", "instance_type", "gpu_product", "gpus")


class _SimulatedNodeProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        from autoclusters.kube import load_kube
        from autoclusters.names import Names
        from autoclusters.sim.nodes import GpuShape, create_gpu_node

        kube = load_kube(props.get("kubeconfig") or None)
        shape = GpuShape(instance_type=props["instance_type"], product=props["gpu_product"], gpus=int(props["gpus"]))
        node = create_gpu_node(kube, props["name"], props["pool"], Names(props["domain"], props["prefix"]), shape)
        return dyn.CreateResult(id_=props["name"], outs={**props, "uid": node["metadata"]["uid"]})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [k for k in _REPLACE_ON if olds.get(k) != news.get(k)]
        changed = replaces or olds.get("kubeconfig") != news.get("kubeconfig")
        return dyn.DiffResult(changes=bool(changed), replaces=replaces, delete_before_replace=True)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs={**news, "uid": olds.get("uid")})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        from autoclusters.kube import NotFound, load_kube

        kube = load_kube(props.get("kubeconfig") or None)
        # The controller may have replaced the node already (a new name joined the pool).
        with contextlib.suppress(NotFound):
            kube.delete(f"/api/v1/nodes/{props['name']}")


class SimulatedGpuNode(dyn.Resource):
    """A kwok node with GPU labels and capacity; deleting it deletes the Node."""

    uid: pulumi.Output[str]

    def __init__(self, resource_name: str, *, node_name: str, pool: str, domain: str, prefix: str,
                 instance_type: str, gpu_product: str, gpus: int, kubeconfig: str | None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        props = {"name": node_name, "pool": pool, "domain": domain, "prefix": prefix,
                 "instance_type": instance_type, "gpu_product": gpu_product, "gpus": gpus,
                 "kubeconfig": kubeconfig or "", "uid": None}
        super().__init__(_SimulatedNodeProvider(), resource_name, props, opts)
