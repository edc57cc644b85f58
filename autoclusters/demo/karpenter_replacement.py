"""The demo's replacement through Karpenter (``make demo ARGS=--karpenter``).

Karpenter (its kwok cloud provider) runs beside the local cluster; a second pool's nodes are
Karpenter's, launched for a training job's workers. A DCGM row-remapping failure (a replace fault) on one of them:
the controller drains it and deletes its NodeClaim, the evicted worker's demand makes
Karpenter launch a new node, and the repair ends when that node is Ready in the pool. The
timeline shows the record's steps and, beside them, Karpenter's own (its NodeClaims'
conditions).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from autoclusters import api
from autoclusters.api import ConsentMode
from autoclusters.clock import parse_iso
from autoclusters.demo import story
from autoclusters.demo.story import Result, say
from autoclusters.devcluster.cluster import LocalCluster
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.local_karpenter import nodepool_manifest
from autoclusters.providers.karpenter import NODEPOOL_LABEL, nodeclaims_path

POOL = "a100-karpenter"
NAMESPACE = "training-karpenter"
STAGES = ("Launched", "Registered", "Initialized")  # a NodeClaim's life, in order


def setup(cluster: LocalCluster, handle: ClusterHandle, progress: Callable[[str], None]) -> list[str]:
    """Karpenter, the pool (replace: karpenter), its NodePool and two workers; returns the nodes."""
    cluster.start_karpenter(progress=progress)
    names = handle.names
    pool = {"apiVersion": f"{names.api_group}/{api.VERSION}", "kind": api.POOLS.kind, "metadata": {"name": POOL},
            "spec": {"consentMode": ConsentMode.AUTO.value,
                     "drain": {"resetDeadlineSeconds": 30, "replaceDeadlineSeconds": 30},
                     "provider": {"type": "simulated", "replace": {"type": "karpenter"}}}}
    handle.apply([pool, nodepool_manifest(POOL, POOL, names)], field_manager="demo")
    say(f"    GpuNodePool {POOL} (consent mode auto; replace: karpenter) and Karpenter NodePool {POOL} "
        f"(template label {names.pool_label}={POOL})")
    handle.apply(story.training_workload(names.pool_label, POOL, replicas=2, namespace=NAMESPACE), field_manager="demo")
    for p in story.wait_running(handle, 2, timeout=240, namespace=NAMESPACE):
        say(f"    {p['metadata']['name']} Running on {p['spec']['nodeName']} (launched by Karpenter)")
    return sorted(n["metadata"]["name"] for n in handle.kube.list_nodes(f"{NODEPOOL_LABEL}={POOL}"))


def hostnames(handle: ClusterHandle, nodes: list[str]) -> dict[str, str]:
    return {n: handle.kube.get_node(n)["metadata"]["labels"]["kubernetes.io/hostname"] for n in nodes}


def karpenter_timeline(handle: ClusterHandle, since: datetime) -> None:
    """Karpenter's side: each NodeClaim of the pool's NodePool created or ended after ``since``."""
    rows: list[tuple[float, int, str]] = []  # (seconds, order within the same second, text)
    for c in handle.kube.list_items(nodeclaims_path(), label_selector=f"{NODEPOOL_LABEL}={POOL}"):
        meta, st = c["metadata"], c.get("status") or {}
        created = parse_iso(meta.get("creationTimestamp"))
        if created and created >= since:
            rows.append(((created - since).total_seconds(), 0, f"NodeClaim {meta['name']} created"))
            for cond in st.get("conditions") or []:
                at = parse_iso(cond.get("lastTransitionTime"))
                if cond.get("type") in STAGES and cond.get("status") == "True" \
                        and at:
                    rows.append(((at - since).total_seconds(), STAGES.index(cond["type"]) + 1,
                                 f"NodeClaim {meta['name']} {cond['type']} (node {st.get('nodeName', '?')})"))
    say("    Karpenter's side (its NodeClaims):")
    for offset, _, what in sorted(rows):
        say(f"    +{offset:6.1f}s  {what}")


def run(handle: ClusterHandle, runtime: Any, args: Any, node: str) -> Result:
    # a replace fault: no Xid's NVIDIA bucket asks for more than a reset (faults/buckets.py)
    result = Result("karpenter", node, "DCGM_FR_ROW_REMAP_FAILURE on GPU 2", ConsentMode.AUTO)
    since = story.now().replace(microsecond=0)
    say(f"    $ {story.inject(args.cluster, str(runtime.spool), node, None, gpu=2, dcgm='DCGM_FR_ROW_REMAP_FAILURE')}")
    cond = story.wait_condition(handle, node, "True", timeout=args.window + 30)
    t_detect = ((parse_iso(cond.get("lastTransitionTime")) or story.now()) - since).total_seconds()
    say(f"    +{t_detect:6.1f}s  {handle.names.gpu_condition}=True  {cond['reason']}: {cond['message']}")
    rec = story.follow(handle, node, since, timeout=300, check=runtime.check)
    result.action = rec.action or "-"
    result.outcome = rec.outcome or rec.phase
    result.phases = {"Detection": t_detect, **story.phase_durations(rec)}
    result.replacement = rec.replacement_node
    karpenter_timeline(handle, since)
    if rec.phase != "Succeeded":
        say(f"    repair ended in {rec.phase}: {rec.message}")
        return result
    story.wait_back_in_service(handle, rec.replacement_node, timeout=120)
    result.total = (story.now() - since).total_seconds()
    workers = story.wait_running(handle, 2, timeout=120, namespace=NAMESPACE)
    say(f"    {rec.replacement_node} (new, from Karpenter) is Ready in pool {POOL}; workers Running on: "
        f"{', '.join(sorted(p['spec']['nodeName'] for p in workers))}")
    return result
