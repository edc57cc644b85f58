"""``autoclusters history`` against a real API server, over records written by the controller's own serializer."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from autoclusters.api import ConsentMode, Phase, RepairAction
from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.names import Names
from tests.integration.ops_support import XID79, cli, create_record, private_domain


@pytest.fixture(scope="module")
def names(cluster: ClusterHandle) -> Iterator[Names]:
    with private_domain(cluster, secrets.token_hex(3)) as n:
        yield n


def flags(names: Names) -> list[str]:
    return ["--domain", names.domain, "--condition-prefix", names.prefix]


def replaced(name: str, node: str, pool: str, start: datetime, new_node: str) -> RepairState:
    steps = (TimelineStep("Scheduled", start, "replace scheduled to start at once"),
             TimelineStep("Draining", start + timedelta(seconds=1), "replace started: cordoned, draining"),
             TimelineStep("Acting", start + timedelta(seconds=31), "drained; replace requested from the provider"),
             TimelineStep("Verifying", start + timedelta(seconds=91), f"node replaced by {new_node}"),
             TimelineStep("Succeeded", start + timedelta(seconds=125), f"node replaced by {new_node}, which is Ready"))
    return RepairState(name=name, node=node, pool=pool, consent_mode=ConsentMode.AUTO,
                       fault=Fault("nvswitch", "24007", "NvidiaSXIDError", "NVSwitch 2 reported SXID 24007."),
                       phase=Phase.SUCCEEDED, action=RepairAction.REPLACE, outcome="Succeeded",
                       replacement_node=new_node, created=start, completed=steps[-1].time, steps=steps)


def waiting(name: str, node: str, pool: str, start: datetime) -> RepairState:
    return RepairState(name=name, node=node, pool=pool, consent_mode=ConsentMode.PROPOSE,
                       fault=Fault("gpu", "79", "NvidiaXIDError", XID79), phase=Phase.AWAITING_APPROVAL,
                       action=RepairAction.RESET, created=start,
                       steps=(TimelineStep("AwaitingApproval", start,
                                           "reset proposed; waiting for the approval label"),))


def test_history_lists_filters_and_shows_a_nodes_timeline(cluster: ClusterHandle, names: Names, unique: str) -> None:
    kube, now = cluster.kube, datetime.now(UTC).replace(microsecond=0)
    pa, pb = f"ha-{unique}", f"hb-{unique}"
    old_node, new_node, other = f"{pa}-0", f"{pa}-9", f"{pb}-0"
    create_record(kube, names, replaced(f"{old_node}-r1", old_node, pa, now - timedelta(days=2), new_node))
    create_record(kube, names, waiting(f"{other}-r2", other, pb, now - timedelta(minutes=5)))

    res = cli(cluster.kubeconfig, "history", "-o", "json", *flags(names))
    assert res.returncode == 0, res.stderr
    repairs = [r for r in json.loads(res.stdout)["repairs"] if r["pool"] in {pa, pb}]
    assert [r["name"] for r in repairs] == [f"{old_node}-r1", f"{other}-r2"]  # oldest first
    first = repairs[0]
    assert (first["node"], first["action"], first["consentMode"], first["phase"], first["outcome"],
            first["replacementNode"], first["durationSeconds"]) == \
        (old_node, "replace", "auto", "Succeeded", "Succeeded", new_node, 125.0)
    assert first["fault"] == {"class": "nvswitch", "code": "24007", "reason": "NvidiaSXIDError",
                              "message": "NVSwitch 2 reported SXID 24007."}
    assert [s["phase"] for s in first["steps"]] == ["Scheduled", "Draining", "Acting", "Verifying", "Succeeded"]

    pool_only = json.loads(cli(cluster.kubeconfig, "history", "-o", "json", "--pool", pb, *flags(names)).stdout)
    assert [r["name"] for r in pool_only["repairs"]] == [f"{other}-r2"]
    recent = json.loads(cli(cluster.kubeconfig, "history", "-o", "json", "--since", "1h", *flags(names)).stdout)
    assert f"{old_node}-r1" not in [r["name"] for r in recent["repairs"]]
    assert f"{other}-r2" in [r["name"] for r in recent["repairs"]]

    # The replacement's name finds the repair that brought it; the timeline follows the table.
    table = cli(cluster.kubeconfig, "history", new_node, *flags(names))
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "REPLACEMENT" in out and new_node in out and "2m05s" in out
    timeline = out[out.index(f"{old_node}-r1:"):].splitlines()
    acting = next(line for line in timeline if " Acting " in line)
    assert "+31s" in acting and "1m00s" in acting and "replace requested from the provider" in acting

    none = cli(cluster.kubeconfig, "history", f"nobody-{unique}", *flags(names))
    assert none.returncode == 0 and f"no repairs recorded of node nobody-{unique}" in none.stdout


def test_history_usage_and_missing_crd_errors(cluster: ClusterHandle, unique: str) -> None:
    bad = cli(cluster.kubeconfig, "history", "--since", "last tuesday")
    assert bad.returncode == 2 and "--since" in bad.stderr
    with private_domain(cluster, unique, install_crds=False) as names:
        res = cli(cluster.kubeconfig, "history", *flags(names))
    assert res.returncode == 1
    assert f"remediations.{names.api_group}" in res.stderr and "not installed" in res.stderr
