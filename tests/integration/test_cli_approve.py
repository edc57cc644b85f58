"""``autoclusters approve`` against a real API server: only nodes that need it, exit codes scripts rely on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube
from autoclusters.names import Names
from tests.integration.helpers import wait_for
from tests.integration.ops_support import (
    cli,
    controller_identity,
    create_nodes,
    delete_pool_nodes,
    labels,
    mark,
    private_domain,
    report_fault,
)


@pytest.fixture()
def as_controller(cluster: ClusterHandle, unique: str) -> Iterator[Kube]:
    with controller_identity(cluster, unique) as kube:
        yield kube


@pytest.fixture()
def names(cluster: ClusterHandle, unique: str) -> Iterator[Names]:
    """A domain of the test's own: these tests play the controller, staging faults and
    maintenance labels by hand, and a controller that watches their domain (one deployed on a
    cluster a kubeconfig names watches the default domain) would act on them: it clears
    maintenance labels it finds no repair for. Without the domain's CRDs no controller decides
    membership, so a node's pool label is its pool, as on a domain's nodes of a pool with no
    object."""
    with private_domain(cluster, unique, install_crds=False) as private:
        yield private


@pytest.fixture()
def pool(cluster: ClusterHandle, names: Names, unique: str) -> Iterator[str]:
    name = f"ap-{unique}"
    yield name
    delete_pool_nodes(cluster, names, name)


# What kube-controller-manager writes on every new node, some seconds after it registered:
# the node lifecycle controller's beta os/arch labels, the TTL controller's annotation. A
# snapshot taken right after the node is Ready may come before them.
CONTROL_PLANE_KEYS = frozenset({"beta.kubernetes.io/os", "beta.kubernetes.io/arch", "node.alpha.kubernetes.io/ttl"})


def settled(meta: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (meta or {}).items() if k not in CONTROL_PLANE_KEYS}


# kube-controller-manager's taints, also on its own schedule: the node lifecycle controller takes
# node.kubernetes.io/not-ready off a new node some time after the node reports Ready, so a
# snapshot taken meanwhile still has it (seen once in CI, on a busy control plane).
CONTROL_PLANE_TAINTS = "node.kubernetes.io/"


def settled_taints(taints: list[dict[str, str]] | None) -> list[dict[str, str]]:
    return [t for t in taints or [] if not t["key"].startswith(CONTROL_PLANE_TAINTS)]


def flags(names: Names) -> list[str]:
    return ["--domain", names.domain, "--condition-prefix", names.prefix]


def test_approve_nodes_only_where_needed(cluster: ClusterHandle, as_controller: Kube, names: Names, pool: str,
                                         unique: str) -> None:
    kube = cluster.kube
    due, healthy = create_nodes(cluster, names, pool, 2)
    report_fault(kube, names, due)
    mark(as_controller, names, due)
    before = kube.get_node(due)

    res = cli(cluster.kubeconfig, "approve", due, healthy, "-o", "json", *flags(names))
    assert res.returncode == 0, res.stderr
    by = {r["node"]: r for r in json.loads(res.stdout)["results"]}
    assert (by[due]["status"], by[due]["done"]) == ("approved", True)
    assert (by[healthy]["status"], by[healthy]["done"]) == ("not-needed", True)
    assert labels(kube, due)[names.maintenance_approved] == "true"
    assert names.maintenance_approved not in labels(kube, healthy)

    # Only the approval label changed: every other label, annotation and taint is as it was
    # (but for what kube-controller-manager adds to a new node on its own schedule).
    after = kube.get_node(due)
    expected = dict(before["metadata"]["labels"], **{names.maintenance_approved: "true"})
    assert settled(after["metadata"]["labels"]) == settled(expected)
    assert settled(after["metadata"].get("annotations")) == settled(before["metadata"].get("annotations"))
    assert settled_taints(after["spec"].get("taints")) == settled_taints(before["spec"].get("taints"))
    assert any(t["key"] == names.taint_key for t in settled_taints(after["spec"].get("taints")))

    again = cli(cluster.kubeconfig, "approve", due, *flags(names))
    assert again.returncode == 0 and "already-approved" in again.stdout

    missing = cli(cluster.kubeconfig, "approve", due, f"nope-{unique}", "-o", "json", *flags(names))
    assert missing.returncode == 1
    data = json.loads(missing.stdout)
    assert data["ok"] is False
    assert {r["node"]: r["status"] for r in data["results"]} == {due: "already-approved",
                                                                 f"nope-{unique}": "not-found"}


def test_approve_pool_and_dry_run(cluster: ClusterHandle, as_controller: Kube, names: Names, pool: str,
                                  unique: str) -> None:
    kube = cluster.kube
    a, b, healthy = create_nodes(cluster, names, pool, 3)
    for node in (a, b):
        report_fault(kube, names, node)
        mark(as_controller, names, node)

    dry = cli(cluster.kubeconfig, "approve", "--pool", pool, "--dry-run", "-o", "json", *flags(names))
    assert dry.returncode == 0, dry.stderr
    assert {r["node"]: r["status"] for r in json.loads(dry.stdout)["results"]} == \
        {a: "would-approve", b: "would-approve"}
    assert names.maintenance_approved not in labels(kube, a)

    res = cli(cluster.kubeconfig, "approve", "--pool", pool, *flags(names))
    assert res.returncode == 0, res.stderr
    assert "2 approved" in res.stderr
    for node in (a, b):
        assert labels(kube, node)[names.maintenance_approved] == "true"
    assert names.maintenance_approved not in labels(kube, healthy)
    assert healthy not in res.stdout  # nodes that need nothing are not even touched

    nothing = cli(cluster.kubeconfig, "approve", "--pool", pool, *flags(names))
    assert nothing.returncode == 0 and "already-approved" in nothing.stdout

    unknown = cli(cluster.kubeconfig, "approve", "--pool", f"nopool-{unique}", *flags(names))
    assert unknown.returncode == 1 and f"no pool 'nopool-{unique}'" in unknown.stderr


def test_approve_usage_errors(cluster: ClusterHandle) -> None:
    assert cli(cluster.kubeconfig, "approve").returncode == 2
    both = cli(cluster.kubeconfig, "approve", "n1", "--pool", "p")
    assert both.returncode == 2 and "either NODE... or --pool" in both.stderr


def test_approve_with_the_reference_systems_names(cluster: ClusterHandle, as_controller: Kube, unique: str) -> None:
    """domain crusoe.ai / prefix Crusoe: the reference system's labels, approved unchanged."""
    names = Names(domain="crusoe.ai", prefix="Crusoe")
    pool = f"cr-{unique}"
    (node,) = create_nodes(cluster, names, pool, 1)
    try:
        report_fault(cluster.kube, names, node)
        mark(as_controller, names, node)
        res = cli(cluster.kubeconfig, "approve", "--pool", pool, "--domain", "crusoe.ai", "--condition-prefix",
                  "Crusoe")
        assert res.returncode == 0, res.stderr
        assert labels(cluster.kube, node)["crusoe.ai/maintenance-approved"] == "true"
        assert "autoclusters.io/maintenance-approved" not in labels(cluster.kube, node)
    finally:
        delete_pool_nodes(cluster, names, pool)


def test_approve_under_the_admission_floor(cluster: ClusterHandle, as_controller: Kube, unique: str) -> None:
    """With the CEL floor bound to the test's nodes: approving a due node passes, and the floor's rejection of
    an approval for a node that no longer needs a repair is what ``approve`` reads as done."""
    from autoclusters.deploy.admission import admission_policy, admission_policy_binding
    from autoclusters.kube import KubeError
    from autoclusters.ops.approval import approval_patch, is_cleared_rejection

    with private_domain(cluster, unique, install_crds=False) as names:
        pool = f"floor-{unique}"
        policy = admission_policy(names, name=f"ops-floor-{unique}")
        binding = admission_policy_binding(policy_name=f"ops-floor-{unique}",
                                           node_selector={"matchLabels": {names.pool_label: pool}})
        cluster.apply([policy, binding])
        try:
            due, cleared = create_nodes(cluster, names, pool, 2)
            mark(as_controller, names, due)  # the controller's identity may set the required label

            def floor_active() -> bool:  # the policy takes a moment to reach the API server's cache
                try:
                    cluster.kube.patch_node(cleared, {"metadata": {"labels": {names.maintenance_required: "true"}}})
                except KubeError as e:
                    return "controller only" in str(e)
                cluster.kube.patch_node(cleared, {"metadata": {"labels": {names.maintenance_required: None}}})
                return False

            wait_for("the admission floor to be enforced", floor_active, timeout=30)
            res = cli(cluster.kubeconfig, "approve", due, cleared, "-o", "json", *flags(names))
            assert res.returncode == 0, res.stderr
            assert {r["node"]: r["status"] for r in json.loads(res.stdout)["results"]} == \
                {due: "approved", cleared: "not-needed"}

            rv = cluster.kube.get_node(cleared)["metadata"]["resourceVersion"]
            with pytest.raises(KubeError) as rejected:
                cluster.kube.patch_node(cleared, approval_patch(names, rv))
            assert is_cleared_rejection(rejected.value), str(rejected.value)
        finally:
            for obj in (binding, policy):
                cluster.kube.delete_object(obj)
            delete_pool_nodes(cluster, names, pool)
