"""The Helm chart installed as docs/deploy.md ("With Helm") tells a user, on the local cluster's
real nodes (issue 29 item 2): ``helm install`` of a chart of one's own settings, the documented
wait for the webhook, the pools' chart installed after it; every part Ready as pods there; one
repair through those pods, whose reboot Job runs the image the values name; ``helm upgrade``
with a changed value rolls the controller and recreates nothing else; ``helm upgrade`` of the
pools' chart with the pool's consent mode changed from auto to propose, after which the next
fault waits for approval (the node marked, not cordoned); then the documented removal
(``autoclusters uninstall --stop``, both ``helm uninstall``), which leaves no mark on any node and
keeps the CRDs, the namespace and the records (``helm.sh/resource-policy: keep``).

The chart is rendered as a user with settings of their own would render it
(``components.render --config ... --out DIR`` writes ``DIR/chart``): the one render-time
setting a test shortens is the reboot's final verb (devcluster/node_init.py's, which restarts
the node under a new boot id; this machine never reboots); the detector's persistence window
and the image are values, set with ``--set``.
"""

from __future__ import annotations

import contextlib
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
from components.render import EXAMPLE_POOLS
from tests.integration.helpers import kubectl, wait_for
from tests.integration.real_nodes_support import XID79, helm_run, ready_parts, repaired_through_job

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
POOL = "h100"  # the example pool: consent mode auto, provider hostReboot
IMAGE = f"{LOCAL_IMAGE_REPOSITORY}:{__version__}"
RELEASE = "autoclusters"
RELEASE_NS = "default"  # docs/deploy.md: the chart holds its own namespace, the release lives elsewhere
POOLS_RELEASE = "autoclusters-pools"


def _own_chart(tmp: Path) -> Path:
    """The user's own chart and pools, rendered from their settings (docs/deploy.md)."""
    settings = tmp / "settings.yaml"
    settings.write_text(yaml.safe_dump({"hostRebootCommand": REBOOT_VERB}))
    out = tmp / "base"
    subprocess.run([sys.executable, "-m", "components.render", "--config", str(settings), "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True, timeout=300)
    return out


@pytest.fixture()
def rendered(real_cluster: ClusterHandle, helm: Path, tmp_path: Path) -> Iterator[tuple[Path, list[RealNode]]]:
    assert real_cluster.dev is not None
    nodes = real_cluster.dev.real_nodes()
    names, cfg, kube = Names(), real_cluster.kubeconfig, real_cluster.kube
    for node in nodes:  # the operator puts the GPU nodes into the pool, as on any cluster
        kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: POOL}}})
    out = _own_chart(tmp_path)
    try:
        yield out, nodes
    finally:  # whatever the test left: the release, then what the chart keeps on uninstall
        for release in (POOLS_RELEASE, RELEASE):
            subprocess.run([str(helm), "uninstall", release, "--namespace", RELEASE_NS, "--ignore-not-found",
                            "--kubeconfig", cfg], capture_output=True, timeout=300, check=False)
        kubectl(cfg, "delete", "namespace", DEFAULT_NAMESPACE, "--ignore-not-found", check=False, timeout=300)
        kubectl(cfg, "delete", "crd", f"{api.POOLS.plural}.{names.api_group}",
                f"{api.REMEDIATIONS.plural}.{names.api_group}", "--ignore-not-found", check=False, timeout=120)
        for node in nodes:
            with contextlib.suppress(NotFound):
                kube.patch_node(node.name, {"metadata": {"labels": {names.pool_label: None}}})


def _pools_values(tmp: Path, mode: str) -> Path:
    """The pools' values file a GitOps repository holds: the example pool, in consent mode ``mode``."""
    pool = {**next(p for p in EXAMPLE_POOLS if p["name"] == POOL), "consentMode": mode}
    path = tmp / f"pools-{mode}.yaml"
    path.write_text(yaml.safe_dump({"pools": [pool]}))
    return path


def _uids(kube: Kube, ns: str) -> dict[str, str]:
    """The uid of each object of the release that an upgrade must not recreate."""
    out = {}
    for path in (f"/apis/apps/v1/namespaces/{ns}/deployments", f"/apis/apps/v1/namespaces/{ns}/daemonsets",
                 f"/api/v1/namespaces/{ns}/services", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"):
        for obj in kube.list_items(path):
            if "autoclusters" in obj["metadata"]["name"]:
                out[f"{path}/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
    return out


def test_the_chart_installs_repairs_a_real_node_upgrades_and_uninstalls_as_documented(
        real_cluster: ClusterHandle, helm: Path, rendered: tuple[Path, list[RealNode]],
        capsys: pytest.CaptureFixture[str]) -> None:
    out, nodes = rendered
    cfg, kube, names, ns = real_cluster.kubeconfig, real_cluster.kube, Names(), DEFAULT_NAMESPACE
    chart = str(out / "chart")
    values = ["--set", f"image={IMAGE}", "--set", "detector.windowSeconds=3"]
    t0 = time.monotonic()
    # docs/deploy.md, "With Helm": these three steps and no other
    helm_run(helm, cfg, "install", RELEASE, chart, "--namespace", RELEASE_NS, *values)
    kubectl(cfg, "-n", ns, "wait", "--for=condition=Available", "deployment/autoclusters-webhook",
            "--timeout=240s", timeout=300)
    pools = ["--namespace", RELEASE_NS, "--values"]
    helm_run(helm, cfg, "install", POOLS_RELEASE, str(out / "pools-chart"), *pools, str(_pools_values(out, "auto")))
    real = {n.name for n in nodes}
    by_part = wait_for("every part Ready as pods on the real nodes", lambda: ready_parts(real_cluster, ns, real),
                       timeout=180)
    with capsys.disabled():
        print(f"\nhelm install on the real nodes: every part Ready after {time.monotonic() - t0:.1f}s\n"
              + kubectl(cfg, "get", "pods", "-o", "wide", "-n", ns), file=sys.stderr)
    pods = [p for part in by_part.values() for p in part]
    assert {c["image"] for p in pods for c in p["spec"]["containers"] if c["name"] != "opa"} == {IMAGE}
    for pod in pods:
        assert all(c["restartCount"] == 0 for c in pod["status"]["containerStatuses"]), pod["status"]

    node = nodes[0]
    before = boot_id(kube.get_node(node.name))
    node.write_kernel_log(f"4,1301,{int(time.monotonic() * 1e6)},-;{XID79}")
    job_images: set[str] = set()
    wait_for("the node rebooted through the reboot Job, verified and uncordoned",
             lambda: repaired_through_job(kube, ns, node.name, before, job_images),
             timeout=300, interval=0.5)
    records_path = Kube.custom_path(names.api_group, api.VERSION, api.REMEDIATIONS.plural)
    records = [r for r in kube.list_items(records_path) if r["spec"]["node"] == node.name]
    assert records and records[-1]["status"]["phase"] == "Succeeded", records
    assert job_images == {IMAGE}  # the image value reached the reboot Job (the policy's literal too)

    # helm upgrade with one value changed: the controller rolls with the new flag, nothing is recreated
    uids = _uids(kube, ns)
    helm_run(helm, cfg, "upgrade", RELEASE, chart, "--namespace", RELEASE_NS, *values, "--set", "controller.workers=7")
    kubectl(cfg, "-n", ns, "rollout", "status", f"deployment/{CONTROLLER}", "--timeout=240s", timeout=300)
    deployment = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{CONTROLLER}")
    args = [a for c in deployment["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
    assert "--workers=7" in args or ("--workers" in args and args[args.index("--workers") + 1] == "7"), args
    assert _uids(kube, ns) == uids
    pool_path = Kube.custom_path(names.api_group, api.VERSION, api.POOLS.plural, POOL)
    assert kube.get(pool_path)["metadata"]["annotations"]["meta.helm.sh/release-name"] == POOLS_RELEASE

    # helm upgrade of the pools' chart, the consent mode changed in its values: the next fault waits
    helm_run(helm, cfg, "upgrade", POOLS_RELEASE, str(out / "pools-chart"), *pools, str(_pools_values(out, "propose")))
    assert kube.get(pool_path)["spec"]["consentMode"] == "propose"
    other = nodes[1]
    other.write_kernel_log(f"4,1302,{int(time.monotonic() * 1e6)},-;{XID79}")

    def awaiting() -> dict[str, Any] | None:
        open_ = [r for r in kube.list_items(records_path) if r["spec"]["node"] == other.name]
        return open_[-1] if open_ and open_[-1].get("status", {}).get("phase") == api.Phase.AWAITING_APPROVAL else None

    record = wait_for("the next fault's repair waits for approval", awaiting, timeout=120)
    assert record["spec"]["consentMode"] == "propose"
    marked = kube.get_node(other.name)
    assert marked["metadata"]["labels"].get(names.maintenance_required) == "true"
    assert not marked["spec"].get("unschedulable")  # propose: the node keeps its work until approved

    # docs/deploy.md, "Removal", what Helm installed: these steps
    done = subprocess.run([sys.executable, "-m", "autoclusters.cli.main", "uninstall", "--stop", "--kubeconfig", cfg],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    helm_run(helm, cfg, "uninstall", POOLS_RELEASE, "--namespace", RELEASE_NS, "--wait")
    helm_run(helm, cfg, "uninstall", RELEASE, "--namespace", RELEASE_NS, "--wait")
    for n in nodes:
        obj = kube.get_node(n.name)
        assert marks_of(names, obj) == [], obj
        assert not obj["spec"].get("unschedulable") and node_ready(obj)
    assert kube.get(f"/api/v1/namespaces/{ns}")  # kept: helm.sh/resource-policy: keep
    kept = [r["metadata"]["name"] for r in kube.list_items(records_path) if r["spec"]["node"] == node.name]
    assert kept == [r["metadata"]["name"] for r in records]  # the history is kept with its CRD
    with pytest.raises(NotFound):
        kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{CONTROLLER}")
