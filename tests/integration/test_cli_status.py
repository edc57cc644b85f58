"""``autoclusters status`` against a real API server: pools, faulty nodes, open repairs, breaker state."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoclusters import api
from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.kube import Kube
from autoclusters.names import Names
from tests.integration.ops_support import (
    XID79,
    cli,
    controller_identity,
    create_nodes,
    create_pool,
    create_record,
    delete_pool_nodes,
    mark,
    private_domain,
    report_fault,
)


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3)) as n:
        yield n


@pytest.fixture()
def as_controller(cluster: ClusterHandle, unique: str) -> Iterator[Kube]:
    with controller_identity(cluster, unique) as kube:
        yield kube


def flags(names: Names) -> list[str]:
    return ["--domain", names.domain, "--condition-prefix", names.prefix]


def state(name: str, node: str, pool: str, phase: Phase, **kw: object) -> RepairState:
    now = datetime.now(UTC) - timedelta(minutes=2)
    return RepairState(name=name, node=node, pool=pool, consent_mode=ConsentMode.PROPOSE,
                       fault=Fault("gpu", "79", "NvidiaXIDError", XID79), phase=phase, action=RepairAction.RESET,
                       created=now, steps=(TimelineStep(phase.value, now, f"entered {phase.value}"),), **kw)  # type: ignore[arg-type]


def test_status_shows_pools_faulty_nodes_and_open_repairs(cluster: ClusterHandle, names: Names, as_controller: Kube,
                                                          unique: str) -> None:
    pool = f"st-{unique}"
    waiting, draining, healthy = create_nodes(cluster, names, pool, 3)
    try:
        create_pool(cluster.kube, names, pool, "propose",
                    status={"nodes": 3, "faultyNodes": 2, "circuitBreaker": {"state": "Open", "message": "67%"}})
        for node in (waiting, draining):
            report_fault(cluster.kube, names, node)
            mark(as_controller, names, node)
        create_record(cluster.kube, names, state(f"{waiting}-r", waiting, pool, Phase.AWAITING_APPROVAL))
        create_record(cluster.kube, names, state(f"{draining}-r", draining, pool, Phase.DRAINING))
        create_record(cluster.kube, names, state(f"{healthy}-old", healthy, pool, Phase.SUCCEEDED,
                                                 outcome="Succeeded"))

        res = cli(cluster.kubeconfig, "status", "-o", "json", "--pool", pool, *flags(names))
        assert res.returncode == 0, res.stderr
        data = json.loads(res.stdout)
        assert data["crds"] == {"gpuNodePools": True, "remediations": True}
        assert data["notes"] == []
        (p,) = data["pools"]
        assert (p["consentMode"], p["nodes"], p["ready"], p["faulty"], p["awaitingApproval"], p["repairing"],
                p["breaker"]) == ("propose", 3, 3, 2, 1, 1, "open")
        faulty = {f["node"]: f for f in data["faultyNodes"]}
        assert set(faulty) == {waiting, draining}
        assert faulty[waiting]["repair"]["phase"] == "AwaitingApproval"
        assert faulty[draining]["repair"]["phase"] == "Draining"
        assert faulty[waiting]["reason"] == "NvidiaXIDError" and "Xid 79" in faulty[waiting]["message"]
        assert faulty[waiting]["labels"] == {"maintenanceRequired": True, "maintenanceApproved": False}
        assert faulty[waiting]["tainted"] is True
        assert faulty[waiting]["ageSeconds"] is not None and faulty[waiting]["ageSeconds"] < 120

        table = cli(cluster.kubeconfig, "status", "--pool", pool, *flags(names))
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        pool_line = next(line for line in lines if line.startswith(pool + " "))
        assert pool_line.split() == [pool, "propose", "3", "3", "2", "1", "1", "0", "open"]
        waiting_line = next(line for line in lines if line.startswith(waiting))
        assert "NvidiaXIDError: GPU 3 reported Xid 79" in waiting_line
        assert "required,tainted" in waiting_line and "AwaitingApproval" in waiting_line
        assert not any(line.startswith(healthy) for line in lines)
    finally:
        delete_pool_nodes(cluster, names, pool)


def test_status_without_crds_shows_what_nodes_tell_and_says_what_is_missing(cluster: ClusterHandle,
                                                                            unique: str) -> None:
    with private_domain(cluster, unique, install_crds=False) as names:
        pool = f"nocrd-{unique}"
        faulty, _ = create_nodes(cluster, names, pool, 2)
        try:
            report_fault(cluster.kube, names, faulty)
            res = cli(cluster.kubeconfig, "status", *flags(names))
            assert res.returncode == 0, res.stderr
            assert f"note: the GpuNodePool CRD (gpunodepools.{names.api_group}) is not installed" in res.stdout
            assert f"note: the Remediation CRD (remediations.{names.api_group}) is not installed" in res.stdout
            line = next(line for line in res.stdout.splitlines() if line.startswith(faulty))
            assert "NvidiaXIDError" in line
            data = json.loads(cli(cluster.kubeconfig, "status", "-o", "json", *flags(names)).stdout)
            assert data["crds"] == {"gpuNodePools": False, "remediations": False}
            (p,) = [p for p in data["pools"] if p["name"] == pool]
            assert (p["nodes"], p["faulty"], p["consentMode"], p["awaitingApproval"]) == (2, 1, None, None)
        finally:
            delete_pool_nodes(cluster, names, pool)


def test_status_places_nodes_by_the_membership_rule_and_the_crd_refuses_an_empty_selector(
        cluster: ClusterHandle, names: Names, unique: str) -> None:
    """The reproduced disagreement: a node labelled with pool ``a`` that another pool's selector
    also matches is in ``a`` (docs/operations.md, "Which pool a node belongs to")."""
    from autoclusters.kube import Invalid
    from autoclusters.pools.pool_config import gpu_node_pool_object, pool_from_config

    pools_path = Kube.custom_path(names.api_group, api.VERSION, "gpunodepools")
    a, sel, stray = f"mem-{unique}", f"mem-{unique}-sel", f"mem-{unique}-none"
    zone = {f"zone-{unique}": "z1"}
    bad: dict[str, Any]
    for bad in ({}, {"matchLabels": {}}, zone):  # a bare mapping is pruned to {} by the API server
        obj = gpu_node_pool_object(pool_from_config({"name": f"bad-{unique}"}), names)
        obj["spec"]["nodeSelector"] = bad
        with pytest.raises(Invalid, match="nodeSelector needs matchLabels or matchExpressions"):
            cluster.kube.create(pools_path, obj)
    labelled, _ = create_nodes(cluster, names, a, 2)
    (claimed,) = create_nodes(cluster, names, stray, 1)  # its label names no pool object
    try:
        create_pool(cluster.kube, names, a, "propose")
        cluster.kube.create(pools_path, gpu_node_pool_object(
            pool_from_config({"name": sel, "nodeSelector": {"matchLabels": zone}}), names))
        for node in (labelled, claimed):
            cluster.kube.patch_node(node, {"metadata": {"labels": zone}})
        res = cli(cluster.kubeconfig, "status", "-o", "json", *flags(names))
        assert res.returncode == 0, res.stderr
        counts = {p["name"]: p["nodes"] for p in json.loads(res.stdout)["pools"]}
        assert (counts.get(a), counts.get(sel), counts.get(stray)) == (2, 1, None)
    finally:
        delete_pool_nodes(cluster, names, a)
        delete_pool_nodes(cluster, names, stray)
        for pool in (a, sel):
            cluster.kube.delete_object({"apiVersion": f"{names.api_group}/{api.VERSION}", "kind": "GpuNodePool",
                                        "metadata": {"name": pool}})
