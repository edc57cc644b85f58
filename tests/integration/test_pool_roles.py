"""The pool roles against the real API server (deploy/pool_roles.py): a pool editor (the
aggregated editor ClusterRole) changes the consent mode and the limits of a pool and nothing
else, a pool author (the verb ``author``) changes the rest, a viewer reads. Each identity is
a service account of the test's own namespace, bound to one role."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters import api
from autoclusters.deploy import cluster_scoped_name
from autoclusters.deploy.pool_roles import AUTHOR, EDITOR, VIEWER, pool_roles
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Forbidden, Kube, NotFound, load_kube
from tests.integration.ops_support import private_domain

RBAC = "/apis/rbac.authorization.k8s.io/v1"


class Scene:
    def __init__(self, cluster: ClusterHandle) -> None:
        self.cluster, self.suffix = cluster, secrets.token_hex(3)
        self.ns = f"proles-{self.suffix}"
        self.kubes: dict[str, Kube] = {}
        self.pool_path = ""


@pytest.fixture(scope="module")
def scene(cluster: ClusterHandle) -> Iterator[Scene]:
    s = Scene(cluster)
    with private_domain(cluster, s.suffix, owner="proles") as names:
        roles = pool_roles(names, s.ns)
        bindings = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"{s.ns}-{who}"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": cluster_scoped_name(role, s.ns)},
                     "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": s.ns}]}
                    for who, role in (("editor", EDITOR), ("author", AUTHOR), ("viewer", VIEWER))]
        try:
            kubeconfigs = {who: cluster.service_account_kubeconfig(s.ns, who) for who in ("editor", "author", "viewer")}
            cluster.apply([*roles, *bindings])
            s.kubes = {who: load_kube(kc) for who, kc in kubeconfigs.items()}
            plural = api.POOLS.plural
            s.pool_path = Kube.custom_path(names.api_group, api.VERSION, plural, f"p{s.suffix}")
            cluster.kube.create(Kube.custom_path(names.api_group, api.VERSION, plural), {
                "apiVersion": f"{names.api_group}/{api.VERSION}", "kind": api.POOLS.kind,
                "metadata": {"name": f"p{s.suffix}"},
                "spec": {"consentMode": "propose", "provider": {"type": "simulated"},
                         "preDrain": {"hook": {"url": "https://hooks.example/a"}}}})
            _until_enforced(s)
            yield s
        finally:
            for obj in [*bindings, *roles]:
                cluster.kube.delete_object(obj)
            with contextlib.suppress(NotFound):
                cluster.kube.delete(s.pool_path)
            with contextlib.suppress(NotFound):
                cluster.kube.delete(f"/api/v1/namespaces/{s.ns}")


def _until_enforced(s: Scene) -> None:
    """The policy takes effect once the API server has it: wait for the editor's first refusal."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            s.kubes["editor"].patch(s.pool_path, {"spec": {"provider": {"type": "clusterapi"}}})
        except Forbidden:
            return
        s.cluster.kube.patch(s.pool_path, {"spec": {"provider": {"type": "simulated"}}})  # undo it
        time.sleep(0.2)
    raise AssertionError("the pool editors' policy was not enforced within 30 s")


def _spec(s: Scene) -> dict[str, Any]:
    return dict(s.cluster.kube.get(s.pool_path)["spec"])


def test_an_editor_changes_the_consent_mode_and_the_limits(scene: Scene) -> None:
    editor = scene.kubes["editor"]
    editor.patch(scene.pool_path, {"spec": {"consentMode": "auto"}})
    editor.patch(scene.pool_path, {"spec": {"maxConcurrentRepairs": 3, "circuitBreaker": {"openAbovePercent": 40},
                                            "drain": {"resetDeadlineSeconds": 120}}})
    spec = _spec(scene)
    assert spec["consentMode"] == "auto" and spec["maxConcurrentRepairs"] == 3
    assert spec["circuitBreaker"]["openAbovePercent"] == 40 and spec["drain"]["resetDeadlineSeconds"] == 120


@pytest.mark.parametrize("change", [
    {"spec": {"provider": {"type": "clusterapi"}}},
    {"spec": {"preDrain": {"hook": {"url": "https://hooks.example/elsewhere"}}}},
    {"spec": {"repairCodes": {"gpu:13": "reset"}}},
    {"spec": {"nodeSelector": {"matchLabels": {"gpu": "all"}}}},
    {"metadata": {"labels": {"team": "x"}}},
], ids=["provider", "allow-list-reference", "repair-codes", "selector", "labels"])
def test_an_editor_cannot_change_the_rest(scene: Scene, change: dict[str, Any]) -> None:
    before = _spec(scene)
    with pytest.raises(Forbidden, match="a pool editor may change only consentMode"):
        scene.kubes["editor"].patch(scene.pool_path, change)
    assert _spec(scene) == before


def test_an_author_changes_the_provider_and_a_viewer_only_reads(scene: Scene) -> None:
    scene.kubes["author"].patch(scene.pool_path, {"spec": {"provider": {"type": "clusterapi"}}})
    assert _spec(scene)["provider"] == {"type": "clusterapi"}
    assert scene.kubes["viewer"].get(scene.pool_path)["spec"]["provider"] == {"type": "clusterapi"}
    with pytest.raises(Forbidden):
        scene.kubes["viewer"].patch(scene.pool_path, {"spec": {"consentMode": "off"}})
    scene.kubes["author"].patch(scene.pool_path, {"spec": {"provider": {"type": "simulated"}}})
