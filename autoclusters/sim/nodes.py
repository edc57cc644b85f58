"""Manifests and helpers for simulated (kwok) GPU nodes.

kwok manages every node carrying ``KWOK_NODE_ANNOTATION``: with autoclusters' stages
(``sim/kwok-stages.yaml``) it makes the node Ready, keeps its status fresh and plays its
host's reboots (``sim/hosts.py``).
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from autoclusters.kube import Conflict, Kube
from autoclusters.names import Names

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
SIMULATED_LABEL = "autoclusters.io/simulated"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"


@dataclass(frozen=True)
class GpuShape:
    instance_type: str = "a100-80gb-sxm-ib.8x"
    product: str = "NVIDIA-A100-SXM4-80GB"
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1843Gi"
    pods: str = "110"


A100_8X = GpuShape()


def is_simulated(node: dict[str, Any]) -> bool:
    """A node the local simulator (kwok, started with this annotation as its selector) manages."""
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return ann.get(KWOK_NODE_ANNOTATION) == KWOK_NODE_VALUE


def new_node_name(pool: str) -> str:
    return f"{pool}-{secrets.token_hex(3)}"


def gpu_node_manifest(name: str, pool: str, names: Names, shape: GpuShape = A100_8X,
                      labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                SIMULATED_LABEL: "true",
                names.pool_label: pool,
                INSTANCE_TYPE_LABEL: shape.instance_type,
                GPU_PRODUCT_LABEL: shape.product,
                GPU_COUNT_LABEL: str(shape.gpus),
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods,
                         "nvidia.com/gpu": str(shape.gpus)},
            "allocatable": {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods,
                            "nvidia.com/gpu": str(shape.gpus)},
            "nodeInfo": {"bootID": str(uuid.uuid4()), "kubeletVersion": "fake",
                         "architecture": "amd64", "operatingSystem": "linux"},
        },
    }


def create_gpu_node(kube: Kube, name: str, pool: str, names: Names, shape: GpuShape = A100_8X) -> dict[str, Any]:
    """Creates the node, then writes its status (capacity is dropped on create)."""
    manifest = gpu_node_manifest(name, pool, names, shape)
    with contextlib.suppress(Conflict):  # already there: still make sure of the status
        kube.create("/api/v1/nodes", manifest)
    return kube.patch_node_status(name, {"status": manifest["status"]})


def create_gpu_nodes(kube: Kube, pool: str, count: int, names: Names, shape: GpuShape = A100_8X,
                     prefix: str | None = None) -> list[str]:
    created = []
    for i in range(count):
        name = f"{prefix}-{i}" if prefix else new_node_name(pool)
        create_gpu_node(kube, name, pool, names, shape)
        created.append(name)
    return created
