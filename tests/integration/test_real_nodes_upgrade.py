"""An upgrade from the previous release on the local cluster's real nodes, as docs/deploy.md
("Upgrading") tells a user (issue 29 item 4), by both routes: the previous release (this
repository at ``PREVIOUS_RELEASE``, read with ``git archive`` and rendered by that tree's own
``components.render --config``) installed with ``helm install`` of its chart, or with
``kubectl apply -k`` of its manifests, its pools applied with kubectl as its docs said; one
repair finished through the pods and one proposed repair open (waiting for approval); then the
upgrade: ``helm upgrade --reuse-values`` to this tree's chart (whose values gained keys the
stored values lack) and this tree's pools' chart installed over the pools kubectl made
(``--take-ownership``), or ``kubectl apply -k`` of this tree's manifests and pools. Nothing is
lost: every pool and record is the same object (uid), the finished record's history as it was,
and the open repair, approved after the upgrade, completes through the upgraded controller's
reboot Job.

Both releases run the image this tree builds (the nodes hold one build): what changes across
the upgrade here is every object the charts hold. The previous release's code handing its repair
over to this tree's is tests/integration/test_crd_upgrade.py, which runs that code for real.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoclusters import __version__, api
from autoclusters.deploy import DEFAULT_NAMESPACE
from autoclusters.deploy.workloads import CONTROLLER
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.node_init import REBOOT_VERB
from autoclusters.devcluster.realnodes import LOCAL_IMAGE_REPOSITORY, RealNode
from autoclusters.kube import Kube, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.ops.uninstall import marks_of
from autoclusters.providers.hostreboot import boot_id
from tests.integration.helpers import kubectl, wait_for
from tests.integration.real_nodes_support import XID79, helm_run, ready_parts, repaired_through_job

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "2d0ad5d"  # the last landing before the pools' chart and the chart's variants
IMAGE = f"{LOCAL_IMAGE_REPOSITORY}:{__version__}"
RELEASE, POOLS_RELEASE, RELEASE_NS = "autoclusters", "autoclusters-pools", "default"
# node 0's pool repairs at once, node 1's waits for approval (a repair open across the upgrade)
POOLS: list[dict[str, Any]] = [
    {"name": "up-auto", "consentMode": "auto", "provider": {"type": "hostReboot"}},
    {"name": "up-propose", "consentMode": "propose", "provider": {"type": "hostReboot"}},
]


def _render(tree: Path, settings: Path, out: Path) -> Path:
    """``components.render --config settings --out out`` of the tree's own code."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "components.render", "--config", str(settings), "--out", str(out)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _previous_tree(into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_RELEASE], check=True,
                             capture_output=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=120)
    return into


@pytest.fixture()
def releases(real_cluster: ClusterHandle, helm: Path, tmp_path: Path) -> Iterator[tuple[Path, Path, list[RealNode]]]:
    """(the previous release's render, this tree's, the real nodes), each node in its pool."""
    assert real_cluster.dev is not None
    nodes = real_cluster.dev.real_nodes()
    names, cfg, kube = Names(), real_cluster.kubeconfig, real_cluster.kube
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({"hostRebootCommand": REBOOT_VERB, "pools": POOLS, "image": IMAGE,
                                        "detector": {"windowSeconds": 3}}))
    old = _render(_previous_tree(tmp_path / "previous"), settings, tmp_path / "old")
    new = _render(REPO, settings, tmp_path / "new")
    for node, pool in zip(nodes, POOLS, strict=True):
        kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: pool["name"]}}})
    try:
        yield old, new, nodes
    finally:
        subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "uninstall", "--stop", "--kubeconfig", cfg],
                       capture_output=True, timeout=300, check=False)
        for release in (POOLS_RELEASE, RELEASE):
            subprocess.run([str(helm), "uninstall", release, "--namespace", RELEASE_NS, "--ignore-not-found",
                            "--kubeconfig", cfg], capture_output=True, timeout=300, check=False)
        for out in (new, old):
            kubectl(cfg, "delete", "-k", str(out / "pools"), "--ignore-not-found", check=False, timeout=120)
            kubectl(cfg, "delete", "-k", str(out), "--ignore-not-found", check=False, timeout=300)
        kubectl(cfg, "delete", "namespace", DEFAULT_NAMESPACE, "--ignore-not-found", check=False, timeout=300)
        kubectl(cfg, "delete", "crd", f"{api.POOLS.plural}.{names.api_group}",
                f"{api.REMEDIATIONS.plural}.{names.api_group}", "--ignore-not-found", check=False, timeout=120)
        for node in nodes:
            with contextlib.suppress(NotFound):
                kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: None,
                                                                    names.maintenance_approved: None}}})


def _records(kube: Kube, names: Names) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in kube.list_items(
        Kube.custom_path(names.api_group, api.VERSION, api.REMEDIATIONS.plural))}


def _record_of(kube: Kube, names: Names, node: str, phase: api.Phase) -> dict[str, Any] | None:
    mine = [r for r in _records(kube, names).values() if r["spec"]["node"] == node]
    return mine[-1] if mine and mine[-1].get("status", {}).get("phase") == phase else None


@pytest.mark.parametrize("route", ["helm", "kubectl"])
def test_an_upgrade_from_the_previous_release_keeps_every_pool_and_record_and_finishes_the_open_repair(
        real_cluster: ClusterHandle, helm: Path, releases: tuple[Path, Path, list[RealNode]], route: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    old, new, nodes = releases
    cfg, kube, names, ns = real_cluster.kubeconfig, real_cluster.kube, Names(), DEFAULT_NAMESPACE
    real = {n.name for n in nodes}
    t0 = time.monotonic()
    # the previous release, as its docs/deploy.md said: the system, the wait, the pools with kubectl
    if route == "helm":
        helm_run(helm, cfg, "install", RELEASE, str(old / "chart"), "--namespace", RELEASE_NS,
                 "--set", f"image={IMAGE}", "--set", "detector.windowSeconds=3")
    else:
        kubectl(cfg, "apply", "-k", str(old), timeout=300)
    kubectl(cfg, "-n", ns, "wait", "--for=condition=Available", "deployment/autoclusters-webhook",
            "--timeout=240s", timeout=300)
    kubectl(cfg, "apply", "-k", str(old / "pools"), timeout=120)
    wait_for("every part of the previous release Ready on the real nodes",
             lambda: ready_parts(real_cluster, ns, real), timeout=180)

    done_node, open_node = nodes
    before = boot_id(kube.get_node(done_node.name))
    done_node.write_kernel_log(f"4,1401,{int(time.monotonic() * 1e6)},-;{XID79}")
    wait_for("the previous release repaired node 0 through its reboot Job",
             lambda: repaired_through_job(kube, ns, done_node.name, before, set()), timeout=300, interval=0.5)
    finished = wait_for("node 0's record Succeeded",
                        lambda: _record_of(kube, names, done_node.name, api.Phase.SUCCEEDED), timeout=60)
    open_node.write_kernel_log(f"4,1402,{int(time.monotonic() * 1e6)},-;{XID79}")
    proposed = wait_for("node 1's repair waits for approval",
                        lambda: _record_of(kube, names, open_node.name, api.Phase.AWAITING_APPROVAL), timeout=120)
    pools_path = Kube.custom_path(names.api_group, api.VERSION, api.POOLS.plural)
    pool_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list_items(pools_path)}
    records_before = _records(kube, names)
    t_old = time.monotonic() - t0

    # the upgrade: this tree's system over the previous one's, then its pools: with Helm, the
    # values the release stored and the pools' chart taking over the pools kubectl made
    if route == "helm":
        helm_run(helm, cfg, "upgrade", RELEASE, str(new / "chart"), "--namespace", RELEASE_NS, "--reuse-values")
    else:
        kubectl(cfg, "apply", "-k", str(new), timeout=300)
    for workload in (f"deployment/{CONTROLLER}", "deployment/autoclusters-webhook", "daemonset/autoclusters-detector"):
        kubectl(cfg, "-n", ns, "rollout", "status", workload, "--timeout=240s", timeout=300)
    wait_for("every part of this release Ready on the real nodes", lambda: ready_parts(real_cluster, ns, real),
             timeout=180)
    if route == "helm":
        values = old.parent / "pools.yaml"  # the pools, now in the pools' chart's values
        values.write_text(yaml.safe_dump({"pools": POOLS}))
        helm_run(helm, cfg, "install", POOLS_RELEASE, str(new / "pools-chart"), "--namespace", RELEASE_NS,
                 "--values", str(values), "--take-ownership")
    else:
        kubectl(cfg, "apply", "-k", str(new / "pools"), timeout=120)
    after = {p["metadata"]["name"]: p for p in kube.list_items(pools_path)}
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == pool_uids  # the same pools, now Helm's
    if route == "helm":
        assert all(p["metadata"]["annotations"]["meta.helm.sh/release-name"] == POOLS_RELEASE for p in after.values())
    records_after = _records(kube, names)
    assert {n: r["metadata"]["uid"] for n, r in records_after.items()} == \
        {n: r["metadata"]["uid"] for n, r in records_before.items()}
    assert records_after[finished["metadata"]["name"]]["status"] == finished["status"]  # its history as it was
    assert records_after[proposed["metadata"]["name"]]["status"]["phase"] == api.Phase.AWAITING_APPROVAL

    # the open repair, approved now, completes through the upgraded controller
    before = boot_id(kube.get_node(open_node.name))
    kube.patch_node(open_node.name, {"metadata": {"labels": {names.maintenance_approved: "true"}}})
    wait_for("node 1 repaired through the upgraded controller's reboot Job",
             lambda: repaired_through_job(kube, ns, open_node.name, before, set()), timeout=300, interval=0.5)
    record = wait_for("the proposed record Succeeded",
                      lambda: _record_of(kube, names, open_node.name, api.Phase.SUCCEEDED), timeout=60)
    assert record["metadata"]["uid"] == proposed["metadata"]["uid"]
    with capsys.disabled():
        print(f"\nupgrade ({route}) from {PREVIOUS_RELEASE} on the real nodes: previous release's repairs "
              f"{t_old:.1f}s, all {time.monotonic() - t0:.1f}s", file=sys.stderr)

    # removal, as docs/deploy.md says: nothing left on a node
    done = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "uninstall", "--stop", "--kubeconfig", cfg],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    if route == "helm":
        helm_run(helm, cfg, "uninstall", POOLS_RELEASE, "--namespace", RELEASE_NS, "--wait")
        helm_run(helm, cfg, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait")
    else:
        kubectl(cfg, "delete", "-k", str(new / "pools"), "--ignore-not-found", timeout=120)
        kubectl(cfg, "delete", "-k", str(new), "--ignore-not-found", "--wait", timeout=300)
    for n in nodes:
        obj = kube.get_node(n.name)
        assert marks_of(names, obj) == [], obj
        assert not obj["spec"].get("unschedulable") and node_ready(obj)
