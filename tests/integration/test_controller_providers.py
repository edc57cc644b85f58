"""Providers on the local cluster: no provider holds the repair, the simulated provider never
touches a node the simulator does not manage, invalid settings reach the pool, the host-reboot
provider resets through a real Job (only the reboot itself is played by the simulator), two
replacements whose script names no new node never count one new node, a change of the pool's
provider settings mid-operation does not start the operation again, and the cluster default
policy covers nodes whose pool label names no GpuNodePool."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from autoclusters import names as n
from autoclusters.deploy.stack_config import StackConfig
from autoclusters.kube import NotFound
from autoclusters.pools import default_pool
from autoclusters.providers.hostreboot import COMPONENT
from autoclusters.sim.hosts import FAILING_IMAGE, MISSING_COMMAND_IMAGE, boot_id_after
from autoclusters.sim.nodes import gpu_node_manifest
from tests.integration.controller_support import ROW_REMAP_FAILURE_MESSAGE, Env
from tests.integration.helpers import parse_time, wait_for
from tests.integration.ops_support import cli

pytestmark = pytest.mark.integration

IMAGE = StackConfig().image  # what the reboot Job names; kwok does not pull it


def condition(ctl: Env, pool: str, ctype: str) -> dict[str, Any] | None:
    conds = (ctl.get_pool(pool).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == ctype), None)


def held(ctl: Env, node: str, hold: str) -> dict[str, Any]:
    return wait_for(f"{node} held ({hold})", lambda: next(
        (r for r in ctl.records(node) if (r.get("status") or {}).get("hold") == hold), None))


def reboot_jobs(ctl: Env) -> list[dict[str, Any]]:
    return ctl.kube.list_items(f"/apis/batch/v1/namespaces/{ctl.namespace}/jobs",
                         label_selector=f"app.kubernetes.io/name={COMPONENT}")


def job_for(ctl: Env, node: str) -> dict[str, Any] | None:
    return next((j for j in reboot_jobs(ctl)
                 if j["spec"]["template"]["spec"].get("nodeName") == node), None)


def boot_id(ctl: Env, node: str) -> str:
    return str(((ctl.find_node(node) or {}).get("status") or {}).get("nodeInfo", {}).get("bootID", ""))


def test_a_pool_without_a_provider_reports_the_fault_and_holds_the_repair(ctl: Env, controller_log) -> None:
    pool, (node,) = ctl.pool("auto", provider={})
    ctl.raise_fault(node)
    record = held(ctl, node, "NoRepairProvider")
    assert record["status"]["phase"] == "Scheduled"
    assert "no repair provider configured for reset" in record["status"]["message"]
    wait_for("labelled and tainted", lambda: ctl.labels(node).get(ctl.names.maintenance_required) == "true"
             and ctl.has_taint(node))
    assert not ctl.node(node).get("spec", {}).get("unschedulable")  # never cordoned nor drained
    blocked = ctl.wait_reason(node, n.EVENT_BLOCKED)
    assert blocked["type"] == "Warning" and "no repair provider configured" in blocked["message"]
    cond = wait_for("the pool condition", lambda: (c := condition(ctl, pool, "RepairProviderReady"))
                    and c["status"] == "False" and c)
    assert cond["reason"] == "NoRepairProvider" and "no repair provider configured" in cond["message"]
    ctl.wait_reason(pool, "NoRepairProvider", kind="GpuNodePool")
    assert ctl.get_pool(pool)["status"]["providers"] == "none"
    # naming a provider releases the held repair
    ctl.patch_pool(pool, {"provider": {"type": "simulated"}})
    done = ctl.record_in(node, "Succeeded", timeout=40)
    assert done["metadata"]["name"] == record["metadata"]["name"]
    assert wait_for("condition True", lambda: (condition(ctl, pool, "RepairProviderReady") or {}).get("status")
                    == "True")
    assert not [line for line in controller_log().splitlines()
                if ("crashed" in line or "retrying in" in line) and (pool in line or node in line)]


def test_the_simulated_provider_never_touches_a_node_the_simulator_does_not_manage(ctl: Env) -> None:
    pool, _ = ctl.pool("auto", nodes=0)
    name = f"real-{secrets.token_hex(3)}"
    manifest = gpu_node_manifest(name, pool, ctl.names)
    del manifest["metadata"]["annotations"]["kwok.x-k8s.io/node"]  # a node kwok does not manage: "real"
    manifest.pop("status")
    ctl.kube.create("/api/v1/nodes", manifest)
    try:
        ctl.raise_fault(name)
        record = held(ctl, name, "ProviderRefusedNode")
        assert "only on nodes the local simulator manages" in record["status"]["message"]
        ev = ctl.wait_reason(name, n.EVENT_BLOCKED)
        assert ev["type"] == "Warning" and "kwok.x-k8s.io/node" in ev["message"]
        cond = wait_for("the pool condition", lambda: (c := condition(ctl, pool, "RepairProviderReady"))
                        and c["reason"] == "ProviderRefusedNode" and c)
        assert cond["status"] == "False" and name in cond["message"]
        node = ctl.node(name)
        assert not node["spec"].get("unschedulable")  # not cordoned, not deleted
        assert "sim.autoclusters.io/operation" not in (node["metadata"].get("annotations") or {})
        assert all(r["status"].get("attempts", 0) == 0 for r in ctl.records(name))
    finally:
        ctl.kube.delete(f"/api/v1/nodes/{name}")


def test_invalid_provider_settings_reach_the_pool_and_other_pools_keep_working(ctl: Env, controller_log) -> None:
    bad, (bad_node,) = ctl.pool("auto", provider={"type": "command", "command": {"command": ["/nonexistent/fix"]}})
    good, (good_node,) = ctl.pool("auto")
    ctl.raise_fault(bad_node)
    ctl.raise_fault(good_node)
    valid = wait_for("Valid=False", lambda: (c := condition(ctl, bad, "Valid")) and c["status"] == "False" and c,
                     timeout=10)
    assert valid["reason"] == "InvalidProviderSettings" and "provider.command.command[0]" in valid["message"]
    ev = ctl.wait_reason(bad, "InvalidProviderSettings", kind="GpuNodePool")
    assert ev["type"] == "Warning" and "/nonexistent/fix" in ev["message"]
    record = held(ctl, bad_node, "InvalidProviderSettings")
    assert "provider.command.command[0]" in record["status"]["message"]
    assert ctl.record_in(good_node, "Succeeded", timeout=40)["status"]["outcome"] == "Succeeded"
    assert (condition(ctl, good, "Valid") or {}).get("status") == "True"
    # no crash and no backoff loop for the pool or its node (other tests' lines may be in the log)
    assert not [line for line in controller_log().splitlines()
                if ("crashed" in line or "retrying in" in line) and (bad in line or bad_node in line)]


@pytest.fixture
def local_hosts(ctl: Env) -> None:
    if not ctl.cluster.local:
        pytest.skip("the host's reboot is played by the local cluster's simulator (autoclusters.sim.hosts)")


def test_host_reboot_resets_the_node_through_a_job(ctl: Env, local_hosts: None) -> None:
    _, (node,) = ctl.pool("auto", provider={"type": "hostReboot",
                                            "hostReboot": {"image": IMAGE, "timeoutSeconds": 60}})
    before = boot_id(ctl, node)
    ctl.raise_fault(node)
    job = wait_for("the reboot Job", lambda: job_for(ctl, node))
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["hostPID"] is True
    placed = ctl.node(node)
    assert placed["spec"].get("unschedulable") and ctl.has_taint(node)  # it runs on a cordoned, tainted node
    # the Job controller makes the pod after the Job is there, on its own schedule
    pods = wait_for("the reboot Job's pod", lambda: ctl.kube.list_items(
        f"/api/v1/namespaces/{ctl.namespace}/pods", label_selector=f"job-name={job['metadata']['name']}"))
    assert [p["spec"]["nodeName"] for p in pods] == [node]
    done = ctl.record_in(node, "Succeeded", timeout=60)
    assert done["status"]["action"] == "reset" and done["status"]["outcome"] == "Succeeded"
    assert boot_id(ctl, node) not in ("", before)
    # kwok's stage derives the new boot id from the request (the reboot pod's uid) the way
    # sim.hosts does: a stage played twice cannot reboot the host twice
    assert boot_id(ctl, node) == boot_id_after(pods[0]["metadata"]["uid"])
    # The record turns Succeeded before the controller clears the node; MaintenanceSucceeded
    # is sent once the node is cleared.
    wait_for("node cleaned", lambda: n.EVENT_SUCCEEDED in ctl.reasons(node))
    labels = ctl.labels(node)
    assert ctl.names.maintenance_required not in labels and not ctl.has_taint(node)
    assert not ctl.node(node)["spec"].get("unschedulable")
    with pytest.raises(NotFound):
        ctl.kube.get(f"/apis/batch/v1/namespaces/{ctl.namespace}/jobs/{job['metadata']['name']}")


def _reset_by_a_failing_reboot_job(ctl: Env, image: str) -> tuple[str, str, dict[str, Any]]:
    """A pool resetting through a reboot Job of ``image`` (which kwok's stages fail) and replacing
    by simulation; a fault on its node, the repair escalated and succeeded: (pool, node, record)."""
    pool, (node,) = ctl.pool("auto", provider={
        "reset": {"type": "hostReboot", "hostReboot": {"image": image, "timeoutSeconds": 60}},
        "replace": {"type": "simulated"}})
    ctl.raise_fault(node)
    done = ctl.record_in(node, "Succeeded", timeout=60)
    assert done["status"]["action"] == "replace" and done["status"]["escalated"] is True
    ctl.wait_reason(node, n.EVENT_SUCCEEDED)  # events trail the record (background sender, in order)
    return pool, node, done


def test_a_failed_reboot_job_records_action_failed_then_escalates_to_a_replacement(
        ctl: Env, local_hosts: None) -> None:
    pool, node, done = _reset_by_a_failing_reboot_job(ctl, FAILING_IMAGE)
    new = done["status"]["replacementNode"]
    assert new and ctl.pool_nodes(pool) == [new]
    events = sorted(ctl.events(node), key=lambda e: e.get("eventTime") or e.get("firstTimestamp") or "")
    reasons = [e["reason"] for e in events]
    failed = next(e for e in events if e["reason"] == n.EVENT_FAILED)
    assert reasons.index(n.EVENT_FAILED) < reasons.index(n.EVENT_ESCALATED)
    assert failed["type"] == "Warning" and "VM reset failed" in failed["message"]
    assert f"{ctl.namespace}/host-reboot-" in failed["message"] and "kubectl -n" in failed["message"]
    assert "BackoffLimitExceeded" in failed["message"]
    # the container's own words, read from the Job's pod (kwok's failing stage: exit 1)
    assert "its command exited 1: simulated: the command failed" in failed["message"]


def test_a_host_without_the_reboot_commands_program_says_which_setting_to_change(
        ctl: Env, local_hosts: None) -> None:
    """kwok's stage ends the Job's container as nsenter does on a host without sh (Bottlerocket,
    Talos): exit 127. The real Job controller fails the Job; the provider reads its pod's exit
    status and names the operator's setting, then the repair escalates as for any failed reset."""
    _pool, node, _done = _reset_by_a_failing_reboot_job(ctl, MISSING_COMMAND_IMAGE)
    failed = next(e for e in ctl.events(node) if e["reason"] == n.EVENT_FAILED)
    assert "'sh' is not on the host (exit 127: simulated: nsenter: failed to execute sh" in failed["message"]
    assert "--host-reboot-command" in failed["message"] and "hostRebootCommand" in failed["message"]


def test_two_replacements_whose_script_names_no_node_never_count_one_new_node(ctl: Env) -> None:
    """The command provider's script prints no ``new-node=``: the controller matches each
    replacement to one new node itself, with a patch guarded by the node's resourceVersion.
    Two replacements of one pool wait for their new nodes; one comes: one repair claims it
    and succeeds naming it, the other never counts it (it fails at the verify timeout)."""
    pool, nodes = ctl.pool("auto", nodes=4, maxConcurrentRepairs=2,
                           circuitBreaker={"openAbovePercent": 90, "closeBelowPercent": 80},
                           provider={"reset": {"type": "simulated"},
                                     "replace": {"type": "command", "command": {"command": ["/bin/true"]}}})
    a, b = nodes[:2]
    ctl.raise_fault(a, ROW_REMAP_FAILURE_MESSAGE)  # at once: the pool's nodes may be of the repairs' start second
    ctl.raise_fault(b, ROW_REMAP_FAILURE_MESSAGE)
    verifying = {node: ctl.record_in(node, "Verifying", timeout=30) for node in (a, b)}
    repairs = {node: r["metadata"]["name"] for node, r in verifying.items()}
    for node in (a, b):  # what a replacement script does besides: the old node leaves the cluster
        ctl.kube.delete(f"/api/v1/nodes/{node}")
    # creationTimestamp has whole seconds: only a node of a later second than an operation's
    # start may replace its node (one of the start's own second may be older than the start)
    started = max(parse_time(r["status"]["operation"]["started"]) for r in verifying.values())
    wait_for("a second after the operations started", lambda: datetime.now(UTC) >= started + timedelta(seconds=1))
    (new,) = ctl.create_gpu_nodes(pool, 1, prefix=f"{pool}-new")

    def outcome(node: str) -> str:
        """The repair's outcome once it has one ("" while it runs)."""
        r = next(r for r in ctl.records(node) if r["metadata"]["name"] == repairs[node])
        return str((r.get("status") or {}).get("outcome") or "")

    for node in (a, b):
        wait_for(f"the repair of {node} to end", partial(outcome, node), timeout=40)
    ends = {node: next(r for r in ctl.records(node) if r["metadata"]["name"] == repairs[node]) for node in (a, b)}
    assert sorted(r["status"]["outcome"] for r in ends.values()) == ["Failed", "Succeeded"], ends
    (winner, done), (_, other) = sorted(ends.items(), key=lambda kv: kv[1]["status"]["outcome"] != "Succeeded")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["replacementNode"] == new and new in done["status"]["message"]
    # the other waited for a node of its own until the verify timeout (then closed: its node is gone)
    assert not other["status"].get("replacementNode")
    assert any("did not become Ready" in st["message"] for st in other["status"]["steps"]), other["status"]
    ann = ctl.node(new)["metadata"].get("annotations") or {}
    assert ann[ctl.names.operation_annotation] == done["status"]["operation"]["id"]
    assert ann[f"{ctl.names.api_group}/replaces"] == winner


def test_a_change_of_the_pools_provider_settings_mid_operation_does_not_start_it_again(
        ctl: Env, tmp_path: Path) -> None:
    """The command provider's script notes its run and waits; meanwhile the pool's provider
    settings change (a new spec: a new provider). The controller has seen the change (the
    pool's observedGeneration) before the script ends, and the operation still ends with its
    one run: it is bound to the spec it started with, which the record keeps through the real
    API server (the CRD's schema for status.operation.provider)."""
    runs, release = tmp_path / "runs", tmp_path / "release"
    script = ctl.listed_script(
        f"import os, time\nopen({str(runs)!r}, 'a').write(os.environ['AUTOCLUSTERS_OPERATION_ID'] + '\\n')\n"
        f"end = time.monotonic() + 60\nwhile not os.path.exists({str(release)!r}) and time.monotonic() < end:\n"
        "    time.sleep(0.05)\n")
    first: dict[str, Any] = {"type": "command", "command": {"command": script, "timeoutSeconds": 900}}
    pool, (node,) = ctl.pool("auto", provider=first)
    ctl.raise_fault(node)
    acting = ctl.record_in(node, "Acting", timeout=30)
    op = acting["status"]["operation"]
    assert op["provider"] == first
    wait_for("the script to run", lambda: runs.exists() and runs.read_text().strip())
    ctl.patch_pool(pool, {"provider": {**first, "command": {**first["command"], "timeoutSeconds": 901}}})
    generation = ctl.get_pool(pool)["metadata"]["generation"]
    wait_for("the controller to see the new settings",
             lambda: (ctl.get_pool(pool).get("status") or {}).get("observedGeneration") == generation)
    release.touch()
    done = ctl.record_in(node, "Verifying", "Succeeded", "Failed", timeout=40)
    assert runs.read_text().splitlines() == [op["id"]]
    assert done["status"]["operation"]["id"] == op["id"] and done["status"]["operation"]["provider"] == first


def test_the_cluster_default_policy_covers_nodes_whose_pool_label_names_no_pool(ctl: Env) -> None:
    path = f"/api/v1/namespaces/{ctl.namespace}/configmaps/{default_pool.CONFIGMAP}"
    before = ctl.kube.get(path)
    label_only = f"nopool-{secrets.token_hex(3)}"
    nodes = ctl.create_gpu_nodes(label_only, 1, prefix=label_only)
    ctl.pools.add(label_only)  # the stand-in detector serves these nodes too
    try:
        ctl.kube.patch(path, {"data": {default_pool.KEY: json.dumps(
            {"consentMode": "auto", "provider": {"type": "simulated"}})}})
        ctl.raise_fault(nodes[0])
        done = ctl.record_in(nodes[0], "Succeeded", timeout=40)
        assert done["spec"]["pool"] == label_only and done["status"]["action"] == "reset"
        # `autoclusters status` shows the pool under the default policy, and the policy itself
        res = cli(ctl.cluster.kubeconfig, "status", "-o", "json", "--namespace", ctl.namespace,
                  "--domain", ctl.names.domain, "--condition-prefix", ctl.names.prefix)
        assert res.returncode == 0, res.stderr
        snap = json.loads(res.stdout)
        assert snap["defaultPolicy"]["consentMode"] == "auto"
        assert snap["defaultPolicy"]["providers"] == "reset=simulated replace=simulated"
        (summary,) = [p for p in snap["pools"] if p["name"] == label_only]
        assert summary["defaultPolicy"] is True and summary["poolObject"] is False and summary["nodes"] == 1
    finally:
        ctl.kube.patch(path, {"data": before["data"]})
        for node in nodes:
            ctl.kube.delete(f"/api/v1/nodes/{node}")
