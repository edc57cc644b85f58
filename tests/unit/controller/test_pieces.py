"""Pure pieces of the controller: records round-trip, pool policy, selectors, drain rules,
work queue, providers' object handling, CRD schema."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import pytest

from autoclusters.controller import drain
from autoclusters.controller.pools import parse_pool
from autoclusters.controller.queue import WorkQueue
from autoclusters.controller.records import record_name, state_of, status_of
from autoclusters.controller.statemachine import (
    ConsentMode,
    Fault,
    Operation,
    Phase,
    Policy,
    ProviderState,
    RepairAction,
    RepairState,
    Step,
)
from autoclusters.deploy.controller import controller_rbac
from autoclusters.deploy.crds import crds
from autoclusters.faults.catalog import load_catalog
from autoclusters.kube.objects import selector_matches
from autoclusters.names import Names
from autoclusters.providers.clusterapi import machine_ref, remediation_patch
from autoclusters.providers.command import CommandProvider

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAMES = Names()


def test_record_status_round_trips() -> None:
    s = RepairState(name="n1-abc", node="n1", pool="a", consent_mode=ConsentMode.PROPOSE,
                    fault=Fault("gpu", "79", "NvidiaXIDError", "GPU 3 reported Xid 79."), phase=Phase.ACTING,
                    action=RepairAction.REPLACE, approved=True, escalated=True, attempts=2, drain_started=T,
                    operation=Operation("n1-abc-2", RepairAction.REPLACE, T, "boot", "a-1234"), created=T,
                    steps=(Step("Scheduled", T, "x"),))
    obj = {"metadata": {"name": "n1-abc"}, "spec": {"node": "n1", "pool": "a", "consentMode": "propose",
                                                    "action": "reset",
                                                    "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError",
                                                              "message": "GPU 3 reported Xid 79."}},
           "status": status_of(s)}
    assert state_of(obj) == s


def test_record_without_phase_is_undecided() -> None:
    assert state_of({"metadata": {"name": "x"}, "spec": {}}) is None


def test_record_name_is_stable_per_fault_episode() -> None:
    a = record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 0)
    assert a == record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 0)
    assert a != record_name("n1", "AutoClustersGPUFault", "2026-03-01T12:00:00Z", 1)
    assert a.startswith("n1-")


def test_pool_policy_and_fault_class_overrides() -> None:
    pool = parse_pool({"metadata": {"name": "a"}, "spec": {"consentMode": "propose",
                                                          "faultClasses": {"gpu": "replace", "dcgm": "off"}}})
    cat = load_catalog()
    xid = cat.fault_from_condition({"type": "AutoClustersGPUFault", "status": "True", "reason": "NvidiaXIDError",
                                    "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)."}, NAMES)
    assert xid is not None and pool.action_for(xid) == RepairAction.REPLACE
    dcgm = cat.fault_from_condition({"type": "AutoClustersGPUFault", "status": "True", "reason": "NvidiaDCGMError",
                                     "message": "DCGM_FR_NVLINK_DOWN on GPU 1"}, NAMES)
    assert dcgm is not None and pool.action_for(dcgm) is None
    default = parse_pool({"metadata": {"name": "b"}, "spec": {}})
    assert default.mode == ConsentMode.AUTO and default.action_for(xid) == RepairAction.RESET
    assert default.policy(Policy(verify_timeout_seconds=7)).max_repairs == 3
    assert default.policy(Policy(verify_timeout_seconds=7)).verify_timeout_seconds == 7
    assert default.policy(Policy(approval_label="crusoe.ai/maintenance-approved")).approval_label \
        == "crusoe.ai/maintenance-approved"


def test_selector_expressions() -> None:
    labels = {"a": "1", "b": "2"}
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "c", "operator": "Exists"}]}, labels)


def test_drain_skips_daemonset_and_mirror_pods() -> None:
    ds = {"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet", "controller": True}]}}
    mirror = {"metadata": {"name": "m", "annotations": {drain.MIRROR_ANNOTATION: "x"}}}
    rs = {"metadata": {"name": "w", "ownerReferences": [{"kind": "ReplicaSet", "controller": True}],
                       "labels": {NAMES.auto_replacement_label: "disabled"}}}
    assert drain.drainable([ds, mirror, rs]) == [rs]
    assert drain.opted_out([ds, rs], NAMES.auto_replacement_label)
    assert not drain.opted_out([ds], NAMES.auto_replacement_label)


def test_queue_dedups_and_backs_off_per_key() -> None:
    q = WorkQueue(base_delay=0.05, max_delay=1)
    q.add("a")
    q.add("a")
    q.add("b")
    assert {q.get(0.1), q.get(0.1)} == {"a", "b"} and q.get(0.05) is None
    q.add("a")  # while processing: handed out again after done()
    assert q.get(0.05) is None
    q.done("a")
    assert q.get(0.1) == "a"
    assert q.backoff("a") == 0.05 and q.backoff("a") == 0.1 and q.backoff("a") == 0.2
    q.done("a")
    q.done("b")
    q.add("b")
    assert q.get(0.1) == "b"  # b is not held back by a's failures
    q.forget("a")
    assert q.failures("a") == 0


def test_capi_machine_ref_and_patch() -> None:
    node = {"metadata": {"annotations": {"cluster.x-k8s.io/machine": "m-1",
                                         "cluster.x-k8s.io/cluster-namespace": "capi"}}}
    ref = machine_ref(node)
    assert ref is not None and ref.path() == "/apis/cluster.x-k8s.io/v1beta1/namespaces/capi/machines/m-1"
    assert machine_ref({"metadata": {}}) is None
    op = Operation("r-1", RepairAction.RESET, T)
    patch = remediation_patch(op, "2026-03-01T12:00:00Z")
    assert set(patch["metadata"]["annotations"]) == {"cluster.x-k8s.io/remediate-machine",
                                                     "remediation.autoclusters.io/operation"}


def _wait(provider: CommandProvider, op: Operation) -> ProviderState:
    for _ in range(100):
        view = provider.progress(op, "n1", "a", lambda _n: None)
        if view.state not in (ProviderState.RUNNING, ProviderState.NOT_STARTED):
            return view.state
        time.sleep(0.05)
    raise AssertionError("command did not finish")


def test_command_provider_exit_code_and_idempotence(tmp_path) -> None:
    marker = tmp_path / "runs"
    script = tmp_path / "repair.py"
    script.write_text("import os, sys\n"
                      f"open({str(marker)!r}, 'a').write(os.environ['AUTOCLUSTERS_OPERATION_ID'] + '\\n')\n"
                      "print('new-node=n9')\n"
                      "sys.exit(0 if sys.argv[1] == 'replace' else 3)\n")
    provider = CommandProvider([sys.executable, str(script)], timeout=10)
    ok = Operation("op-1", RepairAction.REPLACE, T)
    provider.drive(ok, "n1", "a")
    provider.drive(ok, "n1", "a")  # a retried drive does not run it twice
    assert _wait(provider, ok) == ProviderState.SUCCEEDED
    assert provider.progress(ok, "n1", "a", lambda _n: None).new_node == "n9"
    bad = Operation("op-2", RepairAction.RESET, T)
    provider.drive(bad, "n1", "a")
    assert _wait(provider, bad) == ProviderState.FAILED
    assert "exited 3" in provider.progress(bad, "n1", "a", lambda _n: None).message
    assert marker.read_text().split() == ["op-1", "op-2"]


def test_command_provider_timeout(tmp_path) -> None:
    provider = CommandProvider([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3)
    op = Operation("op-3", RepairAction.RESET, T)
    provider.drive(op, "n1", "a")
    assert _wait(provider, op) == ProviderState.FAILED


def test_command_provider_rejects_empty_command() -> None:
    from autoclusters.providers import ProviderError

    with pytest.raises(ProviderError):
        CommandProvider([])


def test_crds_and_rbac_shape() -> None:
    pool_crd, rem_crd = crds(NAMES)
    assert pool_crd["spec"]["names"]["shortNames"] == ["gnp"] and rem_crd["spec"]["names"]["shortNames"] == ["rem"]
    spec = pool_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["consentMode"]["enum"] == ["auto", "propose", "off"]
    assert spec["maxConcurrentRepairs"]["minimum"] == 1
    cols = [c["name"] for c in rem_crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert {"Node", "Phase", "Outcome", "Action"} <= set(cols)
    kinds = [o["kind"] for o in controller_rbac(NAMES)]
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]


def test_garbage_collection_takes_only_old_closed_records() -> None:
    from datetime import timedelta

    from autoclusters.controller.manager import expired

    def record(name: str, phase: str, completed: datetime | None) -> dict:
        status = {"phase": phase, "action": "reset"}
        if completed:
            status["completed"] = completed.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"metadata": {"name": name}, "spec": {"node": "n", "pool": "p", "fault": {}}, "status": status}

    old = T - timedelta(days=91)
    recs = [record("old-done", "Succeeded", old), record("new-done", "Succeeded", T - timedelta(days=89)),
            record("old-failed-holding", "Failed", old), record("old-closed", "Closed", old),
            record("running", "Acting", None)]
    assert expired(recs, T, 90) == ["old-done", "old-closed"]


def test_webhook_notifier_posts_json_and_survives_a_dead_endpoint() -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from autoclusters.controller.notifier import WebhookNotifier

    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    WebhookNotifier(f"http://127.0.0.1:{server.server_address[1]}/hook").notify("repair failed", {"node": "n1"})
    server.server_close()
    assert got == [{"subject": "repair failed", "details": {"node": "n1"}}]
    WebhookNotifier("http://127.0.0.1:9/nowhere", timeout=0.5).notify("x", {})  # logged, not raised
    with pytest.raises(ValueError):
        WebhookNotifier("ftp://example.invalid/")


def test_fleet_ignores_heartbeats_and_follows_the_membership_rule() -> None:
    from autoclusters.controller.fleet import POOL_KEY, Fleet

    queued: list[str] = []
    fleet = Fleet(object(), NAMES, load_catalog(), queued.append)  # type: ignore[arg-type]  # no call is made
    fleet._on_pool("a", None, {"metadata": {"name": "a"}, "spec": {}})
    fleet._on_pool("sel", None, {"metadata": {"name": "sel"},
                                 "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}})
    assert fleet.pool_for({"metadata": {"labels": {NAMES.pool_label: "a", "zone": "z1"}}}).name == "a"
    assert fleet.pool_for({"metadata": {"labels": {"zone": "z1"}}}).name == "sel"
    assert fleet.pool_for({"metadata": {"labels": {NAMES.pool_label: "sel"}}}) is None

    def node(beat: str, fault: bool) -> dict:
        cond = {"type": NAMES.gpu_condition, "status": "True" if fault else "False", "lastHeartbeatTime": beat,
                "reason": "NvidiaXIDError" if fault else "NoGpuFaultDetected",
                "message": "GPU 3 reported Xid 79 (GPU has fallen off the bus)." if fault else ""}
        return {"metadata": {"name": "n1", "labels": {NAMES.pool_label: "a"}},
                "status": {"conditions": [cond, {"type": "Ready", "status": "True", "lastHeartbeatTime": beat}]}}

    fleet._on_node("n1", None, node("t0", False))
    assert fleet.counts("a") == (1, 0)
    queued.clear()
    fleet._on_node("n1", node("t0", False), node("t1", False))  # a heartbeat
    assert queued == []
    fleet._on_node("n1", node("t1", False), node("t2", True))  # a fault
    assert "n1" in queued and POOL_KEY + "a" in queued and fleet.counts("a") == (1, 1)
