"""Karpenter on the local cluster: the real controller with its kwok cloud provider.

``start_karpenter`` installs the CRDs that came with the binary (NodePools, NodeClaims,
KWOKNodeClasses, ...), a ``KWOKNodeClass`` named ``default`` and one instance type shaped
like the simulated GPU nodes (``autoclusters.sim.nodes.A100_8X``), then runs Karpenter as
one more component of the cluster: its log is ``logs/karpenter.log`` beside the others,
``dev down`` stops it, and start-up waits for its readiness probe. Karpenter's NodeClaims
become nodes carrying ``kwok.x-k8s.io/node=fake``, which the cluster's kwok manages (Ready,
heartbeats, pods running), so a NodePool behaves as on a cloud, minus the machines.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from autoclusters.deploy.workloads import GPU_TAINT
from autoclusters.devcluster import processes as p
from autoclusters.devcluster.tools import karpenter_tools
from autoclusters.kube import Kube, load_kube
from autoclusters.kube.objects import condition
from autoclusters.names import Names
from autoclusters.sim import nodes as sim

NAMESPACE = "karpenter"
NODE_CLASS = "default"
COMPONENT = "karpenter"

Progress = Callable[[str], None]


def instance_types(shape: sim.GpuShape = sim.A100_8X) -> list[dict[str, Any]]:
    """Karpenter kwok's instance-type file: one on-demand GPU shape in one zone."""
    return [{
        "name": shape.instance_type,
        "offerings": [{"Price": 32.77, "Available": True, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["local-a"]}]}],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": shape.cpu, "memory": shape.memory, "pods": shape.pods,
                      "nvidia.com/gpu": str(shape.gpus)},
    }]


def node_class() -> dict[str, Any]:
    return {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": NODE_CLASS}}


def nodepool_manifest(name: str, pool: str, names: Names, *, limit_gpus: int | None = None,
                      shape: sim.GpuShape = sim.A100_8X) -> dict[str, Any]:
    """A NodePool of simulated GPU nodes whose nodes carry autoclusters' pool label.

    Consolidation and expiry are off (GPU pools run long jobs); the new node's labels come
    from ``spec.template.metadata.labels``, which is where a user's NodePool must put the
    pool label too. The nodes carry the usual GPU taint, so only pods that tolerate it (GPU
    work) make Karpenter launch one.
    """
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {names.pool_label: pool, sim.GPU_PRODUCT_LABEL: shape.product,
                                    sim.GPU_COUNT_LABEL: str(shape.gpus), sim.SIMULATED_LABEL: "true"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": NODE_CLASS},
                "requirements": [{"key": sim.INSTANCE_TYPE_LABEL, "operator": "In", "values": [shape.instance_type]}],
                "taints": [{"key": GPU_TAINT, "value": "present", "effect": "NoSchedule"}],
                "expireAfter": "Never",
            },
        },
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    }
    if limit_gpus is not None:
        spec["limits"] = {"nvidia.com/gpu": str(limit_gpus)}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def apply_crds(kube: Kube, crd_dir: Path, timeout: float = 60) -> list[str]:
    """Applies every CRD in ``crd_dir`` and waits until the API server serves them."""
    names = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                kube.apply(doc, field_manager="autoclusters-dev")
                names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if (condition(crd, "Established") or {}).get("status") == "True":
                break
            if time.monotonic() > deadline:
                raise p.StartError(f"CRD {name} was not Established within {timeout:.0f}s")
            time.sleep(0.2)
    kube.forget_discovery()
    return names


def start_karpenter(cluster_dir: Path, kubeconfig: Path, logs: Path, progress: Progress,
                    timeout: float = 120) -> tuple[p.Proc, dict[str, int]]:
    """Installs Karpenter's CRDs and node class, starts it, waits for its readiness probe."""
    tools = karpenter_tools()
    kube = load_kube(str(kubeconfig), user_agent="autoclusters-dev")
    progress(f"installing Karpenter {tools.version}'s CRDs")
    apply_crds(kube, tools.crds)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
               field_manager="autoclusters-dev")
    kube.apply(node_class(), field_manager="autoclusters-dev")
    types = cluster_dir / "karpenter-instance-types.json"
    types.write_text(json.dumps(instance_types(), indent=2))
    ports = dict(zip(("karpenter_metrics", "karpenter_health"), p.free_ports(2), strict=True))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "SYSTEM_NAMESPACE": NAMESPACE, "KARPENTER_SERVICE": COMPONENT,
           "METRICS_PORT": str(ports["karpenter_metrics"]), "HEALTH_PROBE_PORT": str(ports["karpenter_health"]),
           "INSTANCE_TYPES_FILE_PATH": str(types), "LOG_LEVEL": "info"}
    progress("starting karpenter")
    proc = p.spawn(COMPONENT, [str(tools.binary), f"--leader-election-namespace={NAMESPACE}"], logs, cluster_dir,
                   env=env)
    took = p.wait_healthy(proc, lambda: p.http_ok(f"http://127.0.0.1:{ports['karpenter_health']}/readyz"),
                          timeout, progress)
    progress(f"  karpenter healthy after {took:.1f}s")
    return proc, ports
