"""The stack deployed as a user deploys it, on the local cluster's real nodes: a Pulumi project
(``pulumi up`` through the CLI, ``local`` off, the locally built image) whose one pool holds
both real nodes, reset by the shipped ``hostReboot`` Job. Shared by the real-node tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoclusters.deploy.controller import LEASE_NAME
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.node_init import REBOOT_VERB
from autoclusters.devcluster.realnodes import RealNode
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers.hostreboot import COMPONENT as REBOOT_JOB
from autoclusters.providers.hostreboot import boot_id
from tests.integration.test_pulumi_cli import Project

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus."

# The pool's settings unless a test says otherwise: (stack config path, value, type).
POOL_SETTINGS: dict[str, tuple[str, str]] = {
    "consentMode": ("auto", "string"),
    "provider.type": ("hostReboot", "string"),
    "provider.hostReboot.timeoutSeconds": ("180", "int"),
    "drain.resetDeadlineSeconds": ("20", "int"),
}


@dataclass(frozen=True)
class Deployed:
    proj: Project
    ns: str
    pool: str
    nodes: list[RealNode]


@contextlib.contextmanager
def deployed_stack(cluster: ClusterHandle, tmp_path: Path,
                   pool: dict[str, tuple[str, str]] | None = None) -> Iterator[Deployed]:
    """A Pulumi project of the stack, configured (not yet ``up``) with both real nodes in its
    pool; destroyed after, and the nodes taken out of the pool. ``pool`` overrides
    ``POOL_SETTINGS``."""
    assert cluster.dev is not None
    nodes = cluster.dev.real_nodes()
    suffix = uuid.uuid4().hex[:6]
    ns, name = f"acr-{suffix}", f"real{suffix}"
    names = Names()
    for node in nodes:  # the operator puts the GPU nodes into the pool, as on any cluster
        cluster.kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: name}}})
    proj = Project(tmp_path)
    (tmp_path / "state").mkdir()
    proj.pulumi("login", f"file://{tmp_path / 'state'}")
    proj.pulumi("stack", "init", "real")
    proj.pulumi("config", "set", "kubernetes:kubeconfig", cluster.kubeconfig)
    for key, value in (("local", "false"), ("namespace", ns), ("hostRebootCommand", REBOOT_VERB)):
        proj.pulumi("config", "set", f"autoclusters:{key}", value)
    settings = {**POOL_SETTINGS, **(pool or {})}
    for path, (value, kind) in (("autoclusters:pools[0].name", (name, "string")),
                                *((f"autoclusters:pools[0].{k}", v) for k, v in settings.items()),
                                ("autoclusters:detector.windowSeconds", ("3", "int"))):
        proj.pulumi("config", "set", "--path", path, value, "--type", kind)
    try:
        yield Deployed(proj, ns, name, nodes)
    finally:
        proj.pulumi("destroy", "--yes", check=False)
        print(proj.log.read_text()[-6000:], file=sys.stderr)
        for node in nodes:
            with contextlib.suppress(NotFound):
                cluster.kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: None}}})


def repaired(kube: Kube, node: str, before: str) -> bool:
    """The node rebooted (a boot id other than ``before``), is Ready, uncordoned, and carries
    neither the maintenance label nor the taint."""
    names = Names()
    n = kube.get_node(node)
    labels = n["metadata"].get("labels") or {}
    return (boot_id(n) != before and node_ready(n) and not n["spec"].get("unschedulable")
            and names.maintenance_required not in labels
            and not any(t["key"] == names.taint_key for t in n["spec"].get("taints") or []))


def repaired_through_job(kube: Kube, ns: str, node: str, before: str, job_images: set[str]) -> bool:
    """``repaired``, gathering into ``job_images`` the images of the reboot Jobs seen meanwhile
    (a Job is deleted once it succeeded: it is seen only while it runs)."""
    for job in kube.list_items(f"/apis/batch/v1/namespaces/{ns}/jobs",
                               label_selector=f"app.kubernetes.io/name={REBOOT_JOB}"):
        job_images.update(c["image"] for c in job["spec"]["template"]["spec"]["containers"])
    return repaired(kube, node, before)


def helm_run(helm: Path, cfg: str, *args: str, timeout: float = 300) -> str:
    """``helm ARGS`` against the cluster of ``cfg``; its output, or the test fails with it."""
    done = subprocess.run([str(helm), *args, "--kubeconfig", cfg], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


PARTS = {"autoclusters-controller": 2, "autoclusters-webhook": 2, "autoclusters-detector": 2}


def ready_parts(cluster: ClusterHandle, ns: str, real: set[str]) -> dict[str, list[dict[str, Any]]] | None:
    """The stack's pods by part, once each part has its pods Ready on the real nodes."""
    by_part: dict[str, list[dict[str, Any]]] = {}
    for pod in cluster.kube.list_items(f"/api/v1/namespaces/{ns}/pods"):
        by_part.setdefault(pod["metadata"]["labels"].get("app.kubernetes.io/name", ""), []).append(pod)
    for part, want in PARTS.items():
        ready = [p for p in by_part.get(part, []) if p["spec"].get("nodeName") in real
                 and {c["type"]: c["status"] for c in p["status"].get("conditions", [])}.get("Ready") == "True"]
        if len(ready) != want:
            return None
    controllers = {p["metadata"]["name"] for p in by_part["autoclusters-controller"]}
    try:  # one leader, a controller pod of this stack (a pod that crashes at start never takes it)
        lease = cluster.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE_NAME}")
    except NotFound:
        return None
    if lease["spec"].get("holderIdentity") not in controllers:
        return None
    return by_part
