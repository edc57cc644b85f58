"""``manifests/`` installed as docs/deploy.md tells a GitOps user, on the local cluster's real
nodes (issue 29 item 1, issue 23 item 2): ``kubectl apply -k`` of an overlay of the base, the
documented wait for the webhook, ``kubectl apply -k manifests/pools/``; every part Ready as pods
there; then one repair through those pods, whose reboot Job runs the overlay's image (a
kustomize ``images:`` override reaches every reference: the controller reads its own image,
controller/own_image.py); then the documented removal (``autoclusters uninstall --stop``,
``kubectl delete -k``), which leaves no mark on any node (issue 23 item 4).

The install is what a user's would be: a base rendered from their settings (two a test
shortens: the detector's persistence window and the reboot's final verb, devcluster/
node_init.py's, which restarts the node under a new boot id; this machine never reboots) and an
overlay of it with another image name (the runtime image under ``LOCAL_IMAGE_REPOSITORY``, which
no default names).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autoclusters import __version__, api
from autoclusters.deploy import DEFAULT_NAMESPACE, IMAGE_REPOSITORY
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.node_init import REBOOT_VERB
from autoclusters.devcluster.realnodes import LOCAL_IMAGE_REPOSITORY, RealNode
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.ops.uninstall import condition_types_ours, marks_of
from autoclusters.providers.hostreboot import boot_id
from components.render import OWN_IMAGE_REPLACEMENT
from tests.integration.helpers import kubectl, wait_for
from tests.integration.real_nodes_support import XID79, ready_parts, repaired_through_job

REPO = Path(__file__).resolve().parents[2]
POOL = "h100"  # manifests/pools/h100.yaml: consent mode auto, provider hostReboot
IMAGE = f"{LOCAL_IMAGE_REPOSITORY}:{__version__}"


def _overlay(tmp: Path) -> Path:
    """The user's own base, rendered from their settings (docs/deploy.md: ``components.render
    --config``), and an overlay of it that moves the image."""
    settings = tmp / "settings.yaml"
    settings.write_text(yaml.safe_dump({"hostRebootCommand": REBOOT_VERB, "detector": {"windowSeconds": 3}}))
    base = tmp / "base"
    subprocess.run([sys.executable, "-m", "components.render", "--config", str(settings), "--out", str(base)],
                   check=True, cwd=REPO, capture_output=True, timeout=120)
    overlay = tmp / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, overlay)],  # kustomize takes no absolute path
        "images": [{"name": IMAGE_REPOSITORY, "newName": LOCAL_IMAGE_REPOSITORY}],
        "replacements": [OWN_IMAGE_REPLACEMENT]}))  # as examples/kustomize/registry/ does
    return overlay


@pytest.fixture()
def installed(real_cluster: ClusterHandle, tmp_path: Path) -> Iterator[tuple[Path, list[RealNode]]]:
    assert real_cluster.dev is not None
    nodes = real_cluster.dev.real_nodes()
    names = Names()
    cfg = real_cluster.kubeconfig
    for node in nodes:  # the operator puts the GPU nodes into the pool, as on any cluster
        real_cluster.kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: POOL}}})
    overlay = _overlay(tmp_path)
    try:
        yield overlay, nodes
    finally:
        kubectl(cfg, "delete", "-k", str(overlay.parent / "base" / "pools"), "--ignore-not-found", check=False,
                timeout=120)
        kubectl(cfg, "delete", "-k", str(overlay), "--ignore-not-found", check=False, timeout=300)
        for node in nodes:
            with contextlib.suppress(NotFound):
                real_cluster.kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: None}}})


def test_the_manifests_install_as_documented_and_repair_a_real_node(
        real_cluster: ClusterHandle, installed: tuple[Path, list[RealNode]],
        capsys: pytest.CaptureFixture[str]) -> None:
    overlay, nodes = installed
    cfg, kube, names, ns = real_cluster.kubeconfig, real_cluster.kube, Names(), DEFAULT_NAMESPACE
    t0 = time.monotonic()
    # docs/deploy.md, "The GitOps path", with kubectl: these three steps and no other
    kubectl(cfg, "apply", "-k", str(overlay), timeout=120)
    kubectl(cfg, "-n", ns, "wait", "--for=condition=Available", "deployment/autoclusters-webhook",
            "--timeout=240s", timeout=300)
    kubectl(cfg, "apply", "-k", str(overlay.parent / "base" / "pools"), timeout=120)
    real = {n.name for n in nodes}
    by_part = wait_for("every part Ready as pods on the real nodes", lambda: ready_parts(real_cluster, ns, real),
                       timeout=180)
    with capsys.disabled():  # in the suite's output: the pods ran on the real nodes
        print(f"\nmanifests/ applied on the real nodes: every part Ready after {time.monotonic() - t0:.1f}s\n"
              + kubectl(cfg, "get", "pods", "-o", "wide", "-n", ns), file=sys.stderr)
    pods = [p for part in by_part.values() for p in part]
    assert {c["image"] for p in pods for c in p["spec"]["containers"] if c["name"] != "opa"} == {IMAGE}
    for pod in pods:  # none of them crashed on its way up
        assert all(c["restartCount"] == 0 for c in pod["status"]["containerStatuses"]), pod["status"]

    node = nodes[0]
    before = boot_id(kube.get_node(node.name))
    node.write_kernel_log(f"4,1301,{int(time.monotonic() * 1e6)},-;{XID79}")
    job_images: set[str] = set()
    wait_for("the node rebooted through the reboot Job, verified and uncordoned",
             lambda: repaired_through_job(kube, ns, node.name, before, job_images),
             timeout=300, interval=0.5)
    records = [r for r in kube.list_items(Kube.custom_path(names.api_group, api.VERSION, "remediations"))
               if r["spec"]["node"] == node.name]
    assert records and records[-1]["status"]["phase"] == "Succeeded", records
    assert records[-1]["status"]["operation"]["provider"]["type"] == "hostReboot"
    assert job_images == {IMAGE}  # the override reached the reboot Job's image

    # docs/deploy.md, "Removal", for what manifests/ created: these steps and no other
    conditions = {n.name: [c["type"] for c in kube.get_node(n.name)["status"].get("conditions") or []
                           if c["type"] in condition_types_ours(names)] for n in nodes}
    assert all(conditions.values()), conditions  # the detector pods wrote theirs on every node
    done = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "uninstall", "--stop", "--kubeconfig", cfg],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    kubectl(cfg, "delete", "-k", str(overlay.parent / "base" / "pools"), "--ignore-not-found", timeout=120)
    kubectl(cfg, "delete", "-k", str(overlay), "--ignore-not-found", timeout=300)
    for n in nodes:
        obj = kube.get_node(n.name)
        assert marks_of(names, obj) == [], obj
        assert not obj["spec"].get("unschedulable") and node_ready(obj)
