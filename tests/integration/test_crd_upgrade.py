"""An upgrade from the release before the CRDs moved to ``api.VERSION`` (issue 29 item 4).

The previous release (this repository at ``PREVIOUS_RELEASE``, read with ``git archive``) runs
for real: its CRDs (``v1alpha1`` only) and its controller's RBAC are applied, and its controller
runs as a process from that tree, under a label domain of this test's own (its own CRDs, so the
session's other controllers see nothing of it), on kwok nodes of the local cluster. It repairs one
node (a finished record with its history) and proposes a repair of another (a running one, waiting
for approval). Then the upgrade as docs/deploy.md, "Upgrading", says: the new CRDs and RBAC
applied, the old controller replaced by this tree's. Nothing is lost: the new leader rewrites
every object at the new storage version (each one's resourceVersion moves, its generation does
not) and trims the CRDs' storedVersions, with its event on the CRD; every record and pool reads
the same at both versions, the finished record's history as it was; and the proposed repair,
approved after the upgrade, completes under the new controller.

Not here: the previous release's images on the real nodes (its manifests through kubectl); the
controller processes run the same code those images hold.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api
from autoclusters.controller.storage_migration import CRDS_PATH, MIGRATED
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.crds import crds
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.pools import default_pool
from tests.integration.controller_support import BootWatcher, ControllerProcess, Env
from tests.integration.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "30c95e2"  # the last commit whose CRDs serve only v1alpha1
OLD = api.OLD_VERSIONS[0]
SA = "autoclusters-controller"


def _previous_tree(into: Path) -> Path:
    """The previous release's package, as its image would hold it."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_RELEASE, "autoclusters"],
                             check=True, capture_output=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=60)
    return into


def _previous_objects(tree: Path, names: Names, namespace: str) -> list[dict[str, Any]]:
    """The previous release's CRDs and controller RBAC for ``names``, from its own builders."""
    code = ("import json, sys\nfrom autoclusters.names import Names\nfrom autoclusters.deploy.crds import crds\n"
            "from autoclusters.deploy.controller import controller_rbac\n"
            f"n = Names(domain={names.domain!r}, prefix={names.prefix!r})\n"
            f"json.dump(crds(n) + controller_rbac(n, namespace={namespace!r}, service_account={SA!r}), sys.stdout)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    return list(json.loads(out.stdout))


def _stored_at(cluster: ClusterHandle, names: Names, plural: str, name: str) -> str:
    """The apiVersion an object is stored at in etcd (the local cluster's, through etcd's JSON
    gateway; custom resources are stored as JSON)."""
    assert cluster.dev is not None
    port = (cluster.dev.state() or {})["ports"]["etcd"]
    key = base64.b64encode(f"/registry/{names.api_group}/{plural}/{name}".encode()).decode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v3/kv/range", data=json.dumps({"key": key}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as answer:
        kvs = json.load(answer)["kvs"]
    return str(json.loads(base64.b64decode(kvs[0]["value"]))["apiVersion"])


def _path(names: Names, version: str, plural: str, name: str | None = None) -> str:
    return Kube.custom_path(names.api_group, version, plural, name)


@pytest.fixture()
def previous(cluster: ClusterHandle, tmp_path: Path) -> Iterator[tuple[Env, Path]]:
    """The previous release installed under a domain of its own; everything removed afterwards."""
    suffix = secrets.token_hex(3)
    names = Names(domain=f"upg{suffix}.example.com", prefix="UpgTest")
    namespace = f"upg-{suffix}"
    tree = _previous_tree(tmp_path / "previous")
    objs = _previous_objects(tree, names, namespace)
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace}})
    env: Env | None = None
    try:
        cluster.apply(objs)
        cluster.kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                            default_pool.configmap({"consentMode": "off"}, namespace))
        env = Env(cluster, names, namespace, cluster.service_account_kubeconfig(namespace, SA), tmp_path / "logs")
        env.watcher = BootWatcher(env).start()
        yield env, tree
    finally:
        if env is not None and hasattr(env, "watcher"):
            env.watcher.stop()
            for c in env.controllers:
                c.terminate()
        with contextlib.suppress(NotFound):
            cluster.kube.delete(f"/api/v1/namespaces/{namespace}")
        for obj in objs:
            if obj["kind"] in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
                with contextlib.suppress(NotFound):
                    cluster.kube.delete_object(obj)
        cluster.kube.forget_discovery()


def test_an_upgrade_from_the_previous_release_keeps_every_record_and_finishes_a_running_repair(
        cluster: ClusterHandle, previous: tuple[Env, Path], capsys: pytest.CaptureFixture[str]) -> None:
    env, tree = previous
    if cluster.dev is None:
        pytest.skip("reads what etcd stores: the local cluster's etcd only (not a cluster a kubeconfig names)")
    kube, names = cluster.kube, env.names
    t0 = time.monotonic()
    # the previous release's code: its tree first on the path, not this one (no cwd first: PYTHONSAFEPATH)
    old_controller = ControllerProcess(env.sa_kubeconfig, env.namespace, env.log_dir, "previous",
                                       env=env.process_env(PYTHONPATH=str(tree), PYTHONSAFEPATH="1"))
    env.controllers.append(old_controller)
    env.wait_leader([old_controller], timeout=30)

    pools = {}
    for mode in ("auto", "propose"):  # as the previous release's user wrote them: v1alpha1
        name = f"{mode}-{secrets.token_hex(2)}"
        kube.create(_path(names, OLD, api.POOLS.plural), {
            "apiVersion": f"{names.api_group}/{OLD}", "kind": api.POOLS.kind, "metadata": {"name": name},
            "spec": {"consentMode": mode, "drain": {"resetDeadlineSeconds": 5}, "provider": {"type": "simulated"}}})
        env.pools.add(name)
        pools[mode] = name
    done_node = env.create_gpu_nodes(pools["auto"], 1, prefix=pools["auto"])[0]
    held_node = env.create_gpu_nodes(pools["propose"], 1, prefix=pools["propose"])[0]
    env.raise_fault(done_node)
    env.raise_fault(held_node)

    def old_record(node: str, phase: str) -> dict[str, Any] | None:
        items = kube.list_items(_path(names, OLD, api.REMEDIATIONS.plural))
        return next((r for r in items if r["spec"]["node"] == node and r.get("status", {}).get("phase") == phase),
                    None)

    finished = wait_for("the previous controller's repair finished", lambda: old_record(done_node, "Succeeded"),
                        timeout=60)
    held = wait_for("the previous controller's proposal", lambda: old_record(held_node, "AwaitingApproval"),
                    timeout=60)
    before = {o["metadata"]["name"]: o for path in (_path(names, OLD, api.POOLS.plural),
                                                   _path(names, OLD, api.REMEDIATIONS.plural))
              for o in kube.list_items(path)}
    plural_of = {api.POOLS.kind: api.POOLS.plural, api.REMEDIATIONS.kind: api.REMEDIATIONS.plural}
    assert {_stored_at(cluster, names, plural_of[o["kind"]], n) for n, o in before.items()} == {
        f"{names.api_group}/{OLD}"}
    assert len(finished["status"]["steps"]) >= 4 and api.VERSION not in kube.get(
        f"{CRDS_PATH}/{names.crd_name(api.REMEDIATIONS)}")["status"]["storedVersions"]
    t_old = time.monotonic() - t0

    # docs/deploy.md, "Upgrading": the new CRDs and RBAC applied, then the controller replaced
    cluster.apply(crds(names))
    cluster.apply(controller_rbac(names, namespace=env.namespace, service_account=SA))
    for crd in crds(names):  # the API server adds the new storage version; the old one stays named
        stored = kube.get(f"{CRDS_PATH}/{crd['metadata']['name']}")["status"]["storedVersions"]
        assert stored == [OLD, api.VERSION], stored
    old_controller.terminate()
    new_controller = env.start_controller("current")
    env.wait_leader([new_controller], timeout=30)

    def migrated() -> bool:
        return all(kube.get(f"{CRDS_PATH}/{c['metadata']['name']}")["status"]["storedVersions"] == [api.VERSION]
                   for c in crds(names))

    wait_for("the new leader migrated both CRDs' storage", migrated, timeout=30)
    for crd in crds(names):
        name = crd["metadata"]["name"]
        events = [e for e in kube.list_items("/api/v1/namespaces/default/events",
                                             field_selector=f"involvedObject.name={name}")
                  if e["reason"] == MIGRATED]
        assert len(events) == 1 and "storedVersions" in events[0]["message"], events

    kinds = {api.POOLS.plural: api.POOLS.kind, api.REMEDIATIONS.plural: api.REMEDIATIONS.kind}
    for plural, kind in kinds.items():
        for version in (api.VERSION, OLD):  # every object, readable at both versions
            items = {o["metadata"]["name"]: o for o in kube.list_items(_path(names, version, plural))}
            assert set(items) == {n for n, o in before.items() if o["kind"] == kind}
            for name, now in items.items():
                old = before[name]
                assert now["apiVersion"] == f"{names.api_group}/{version}"
                assert now["metadata"]["generation"] == old["metadata"]["generation"]
                assert now["spec"] == old["spec"]
    assert len([o for o in before.values() if o["kind"] == api.REMEDIATIONS.kind]) == 2
    assert {_stored_at(cluster, names, plural_of[o["kind"]], n) for n, o in before.items()} == {
        f"{names.api_group}/{api.VERSION}"}  # etcd holds every object at the new version
    # the finished record: its history as the previous release wrote it, and rewritten once
    # (no one else writes a finished record: a newer resourceVersion is the migration's write)
    now_finished = kube.get(_path(names, api.VERSION, api.REMEDIATIONS.plural, finished["metadata"]["name"]))
    assert now_finished["status"] == finished["status"]
    assert int(now_finished["metadata"]["resourceVersion"]) > int(finished["metadata"]["resourceVersion"])

    # the running repair, proposed by the previous release, completes under this one
    assert env.decided(held_node).startswith(f"record {held['metadata']['name']} AwaitingApproval")
    env.approve(held_node)
    wait_for("the carried-over repair completed", lambda: (kube.get(_path(
        names, api.VERSION, api.REMEDIATIONS.plural, held["metadata"]["name"])).get("status") or {}).get(
        "phase") == "Succeeded", timeout=60)
    with capsys.disabled():
        print(f"\nupgrade from {PREVIOUS_RELEASE}: previous release's repairs {t_old:.1f}s, "
              f"all {time.monotonic() - t0:.1f}s", file=sys.stderr)
