"""``GpuNodePool``: a pool's nodes and the ``GpuNodePool`` object the controller reads.

Node backends: ``simulated`` creates ``count`` kwok GPU nodes (local cluster only);
``existing`` gives nodes that are already there the pool label with a server-side apply
patch (``NodePatch``), which ``pulumi destroy`` takes back off. Existing nodes are named
(``nodes.names``) or chosen by ``nodes.selector``, resolved when the program runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from autoclusters import api
from autoclusters.api import ConsentMode
from autoclusters.names import Names
from autoclusters.pools.pool_config import NodeBackend, PoolConfig, gpu_node_pool_object
from components._args import ComponentArgsError
from components._k8s import k8s_resource
from components.simulated_node import SimulatedGpuNode

NodeLister = Callable[[Mapping[str, str]], list[str]]


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """``pool`` carries the consent mode (default ``auto``), fault-class actions and limits, validated
    by ``PoolConfig``; ``existing_nodes`` names nodes to label; ``node_lister`` resolves
    ``pool.nodes.selector`` to node names (needed only when a selector is given)."""

    pool: PoolConfig
    names: Names = field(default_factory=Names)
    existing_nodes: Sequence[str] = ()
    node_lister: NodeLister | None = None
    kubeconfig: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pool, PoolConfig):
            raise ComponentArgsError(f"GpuNodePool: pool must be a PoolConfig, got {type(self.pool).__name__}")
        backend = self.pool.nodes.backend
        if backend == NodeBackend.SIMULATED and self.existing_nodes:
            raise ComponentArgsError(f"GpuNodePool {self.pool.name}: existing_nodes apply to the existing backend")
        if backend == NodeBackend.EXISTING and self.pool.nodes.selector and self.node_lister is None:
            raise ComponentArgsError(f"GpuNodePool {self.pool.name}: nodes.selector needs a node_lister")

    @property
    def consent_mode(self) -> ConsentMode:
        return self.pool.consent_mode


class GpuNodePool(pulumi.ComponentResource):
    pool_name: pulumi.Output[str]
    consent_mode: pulumi.Output[str]
    node_names: pulumi.Output[list[str]]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:GpuNodePool", name, None, opts)
        pool, names = args.pool, args.names
        child = pulumi.ResourceOptions(parent=self)
        nodes = self._nodes(args, child)
        obj = gpu_node_pool_object(pool, names)
        # The pool's Pulumi type names its apiVersion: the types of the older versions are
        # aliases, so an upgrade updates the pool in place instead of replacing (deleting) it.
        aliases = [pulumi.Alias(type_=f"kubernetes:{names.api_group}/{v}:{api.POOLS.kind}") for v in api.OLD_VERSIONS]
        self.pool_object = k8s_resource(obj, pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
            aliases=aliases)), name=f"gpunodepool-{pool.name}")
        self.pool_name = pulumi.Output.from_input(pool.name)
        self.consent_mode = pulumi.Output.from_input(pool.consent_mode.value)
        self.node_names = pulumi.Output.from_input(nodes)
        self.register_outputs({"pool_name": self.pool_name, "consent_mode": self.consent_mode,
                               "node_names": self.node_names})

    def _nodes(self, args: GpuNodePoolArgs, child: pulumi.ResourceOptions) -> list[str]:
        pool, names = args.pool, args.names
        if pool.nodes.backend == NodeBackend.SIMULATED:
            out = []
            for i in range(pool.nodes.count):
                node = f"{pool.name}-{i}"
                SimulatedGpuNode(f"node-{node}", node_name=node, pool=pool.name, domain=names.domain,
                                 prefix=names.prefix, instance_type=pool.nodes.instance_type,
                                 gpu_product=pool.nodes.gpu_product, gpus=pool.nodes.gpus_per_node,
                                 kubeconfig=args.kubeconfig, opts=child)
                out.append(node)
            return out
        chosen = list(args.existing_nodes)
        if pool.nodes.selector and args.node_lister is not None:
            chosen += [n for n in args.node_lister(pool.nodes.selector) if n not in chosen]
        for node in chosen:
            k8s.core.v1.NodePatch(f"pool-label-{node}", metadata={
                "name": node,
                "labels": {names.pool_label: pool.name},
                "annotations": {"pulumi.com/patchForce": "true"},
            }, opts=child)
        return chosen
