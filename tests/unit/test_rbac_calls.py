"""Each identity's RBAC rules are the calls its code makes, no more and no fewer
(tests/unit/rbac_calls.py reads the fake API server's request log as the authorizer would).
Each case runs the identity's real code over ``FakeApi`` through the paths that make each kind
of call, then compares: a call no rule grants fails (the code drifted past its role), and so
does a rule no call used (the role drifted past the code)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api
from autoclusters.clock import FakeClock
from autoclusters.deploy import DEFAULT_NAMESPACE, SLURM_BRIDGE_SERVICE_ACCOUNT, WEBHOOK_SERVICE_ACCOUNT
from autoclusters.deploy import stack as stack_objects
from autoclusters.deploy.slurm_bridge import slurm_bridge_rbac
from autoclusters.kube import Kube
from autoclusters.kube.events import EventRecorder
from autoclusters.names import Names
from autoclusters.slurm.bridge import SlurmBridge
from autoclusters.slurm.commands import Slurm
from tests.unit.fakeapi import FakeApi
from tests.unit.rbac_calls import calls, grants, ungranted, unused
from tests.unit.slurm.test_bridge import NOW, FakeSlurm, node, pool, record_for

NAMES = Names()


def _subject(name: str) -> str:
    return f"{DEFAULT_NAMESPACE}:{name}"


def test_the_slurm_bridges_rules_are_its_calls() -> None:
    fake = FakeApi(clock=lambda: NOW)
    warned = node("a-0", "slurm", warned=True)
    fake.put("/api/v1/nodes", warned)
    fake.put(Kube.custom_path(NAMES.api_group, api.VERSION, api.POOLS.plural), pool("slurm", True))
    fake.put(Kube.custom_path(NAMES.api_group, api.VERSION, api.REMEDIATIONS.plural), record_for(warned))
    slurm = FakeSlurm("a-0|mixed|Unknown|Unknown|none\n", {"a-0": "7|RUNNING|1|0|1|a-0\n"}, broken="NodeName=a-0")
    kube, clock = fake.kube(), FakeClock(NOW)
    bridge = SlurmBridge(kube, Slurm(slurm), NAMES, clock, recorder=EventRecorder(kube, clock, "slurm-bridge"))
    for informer in bridge.informers:
        informer.start()
    try:
        for informer in bridge.informers:
            assert informer.synced.wait(5)
        bridge.sync_once()  # scontrol fails: an event
        bridge.sync_once()  # and again: the same event, its count patched
        slurm.broken = ""
        bridge.sync_once()  # drained, the job signalled: the jobs it signalled written on the node
        clock.advance(10)
        bridge.sync_once()  # the job requeued, the repair acknowledged on the node
    finally:
        for informer in bridge.informers:
            informer.stop()
    assert bridge.stats.actions > 0
    given = grants(slurm_bridge_rbac(NAMES), _subject(SLURM_BRIDGE_SERVICE_ACCOUNT))
    made = calls(fake)
    assert ungranted(made, given) == []
    assert unused(made, given) == []


def test_the_webhook_has_no_rules_and_its_deployed_mode_makes_no_call(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The Deployment's arguments, run: the server is built and started as in the pod, and
    loading any Kubernetes client at all fails the test."""
    from aiohttp import web

    from autoclusters import certificates
    from autoclusters.cli.main import main
    from autoclusters.deploy import workloads
    from autoclusters.kube import client

    objs = stack_objects.rbac_objects(NAMES, DEFAULT_NAMESPACE)
    assert grants(objs, _subject(WEBHOOK_SERVICE_ACCOUNT)) == set()
    dep = workloads.webhook_deployment(NAMES, DEFAULT_NAMESPACE, "img", "opa", tls_secret="t", policy_configmap="p")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    now = dt.datetime.now(dt.UTC)
    ca = certificates.make_ca("ca", now, dt.timedelta(days=1))
    leaf = certificates.make_serving(ca, ["autoclusters-webhook.ns.svc"], now, dt.timedelta(days=1))
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    args = [str(tmp_path / a[len("/tls/"):]) if a.startswith("/tls/") else a for a in args]

    def no_client(*_: Any, **__: Any) -> Any:
        raise AssertionError("the webhook's deployed mode loaded a Kubernetes client")

    monkeypatch.setattr(client, "load_kube", no_client)
    monkeypatch.setattr("autoclusters.kube.load_kube", no_client)
    served: list[Any] = []
    monkeypatch.setattr(web, "run_app", lambda app, **kw: served.append((app, kw)))
    # it moves the root logger's handlers onto a queue for the process's life; not in a test run
    monkeypatch.setattr("autoclusters.cli.webhook._log_off_the_request_path", lambda: None)
    assert main(args) == 0
    assert served and served[0][1]["ssl_context"] is not None



def test_the_detectors_rules_are_its_calls_on_a_node(tmp_path: Path) -> None:
    """The DaemonSet's agent (``detector run --node``, the code ``build_agent`` wires): it reads
    its node, patches its conditions and writes events of warnings. The simulated fleet's
    list and watch of nodes are a local cluster's only."""
    from autoclusters.api import KernelLogSource
    from autoclusters.deploy import DETECTOR_SERVICE_ACCOUNT
    from autoclusters.deploy.detector import detector_rbac
    from autoclusters.detector.config import AgentConfig
    from autoclusters.detector.node import NodePaths, build_agent
    from autoclusters.detector.writer import WriterConfig
    from autoclusters.faults.catalog import load_catalog
    from autoclusters.sim.hardware import SimulatedHardware

    catalog = load_catalog()
    fake = FakeApi()
    fake.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                               "status": {"capacity": {"nvidia.com/gpu": "8"}}})
    hw = SimulatedHardware(tmp_path, "n1")
    hw.ensure()
    paths = NodePaths(kernel_log_file=str(hw.kmsg), kernel_log_source=KernelLogSource.FILE,
                      infiniband=str(hw.ib_root), nvidia_proc=str(tmp_path / "proc"), use_nvml=False,
                      gpu_map={"0000:3b:00": 3})
    clock = FakeClock()
    agent, writer, events = build_agent("n1", fake.kube(), clock, catalog, NAMES,
                                        AgentConfig(window_s=0, writer=WriterConfig(min_interval_s=0, qps=1000)),
                                        paths)
    hw.inject({"kind": "xid", "code": 79, "gpu": 3}, catalog)  # a fault: the condition
    hw.inject({"kind": "xid", "code": 13, "gpu": 3}, catalog)  # a warning: an event
    for _ in range(3):
        clock.advance(1)
        agent.poll()
        writer.step()
        writer.wait_idle()
    events.flush()
    writer.close()
    assert any(r.verb == "POST" and r.resource == "events" for r in fake.requests)
    given = grants(detector_rbac(NAMES), _subject(DETECTOR_SERVICE_ACCOUNT))
    made = calls(fake)
    assert ungranted(made, given) == []
    assert unused(made, given) == []
    # a local cluster's detectors are the simulated fleet, which lists and watches the nodes it serves
    local = grants(detector_rbac(NAMES, local=True), _subject(DETECTOR_SERVICE_ACCOUNT))
    assert {(g.resource, g.verb) for g in local - given} == {("nodes", "list"), ("nodes", "watch")}


def test_the_controllers_own_rules_are_its_calls() -> None:
    """The controller's real pieces (tests/unit/controller/harness.py) through a whole repair of
    a node with pods (one evicted, one a PodDisruptionBudget holds, deleted at the deadline), its
    leader election, the webhook's certificate and the collection of old records. Its calls are
    all granted (the simulated provider's rights with them: a local installation's); and every
    rule but the other providers' (tests/unit/policy/test_provider_parity.py holds those to the
    provider table) is used."""
    from autoclusters.controller.manager import Controller
    from autoclusters.controller.shards import LayoutGuard
    from autoclusters.controller.webhook_certs import WebhookCertKeeper
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.admission import webhook_configuration
    from autoclusters.deploy.providers import KINDS
    from autoclusters.deploy.workloads import WEBHOOK_CA_SECRET, WEBHOOK_TLS_SECRET
    from autoclusters.kube.events import ObjectRef
    from autoclusters.kube.leader import LeaderElector
    from autoclusters.webhook.certs import CertPolicy
    from tests.unit.controller.harness import Harness

    h = Harness()
    h.pool("p", drain={"resetDeadlineSeconds": 60, "replaceDeadlineSeconds": 600})
    h.node("n1")
    h.pod("n1", "evicted")
    h.pod("n1", "held")
    h.api.pdb_blocked.add("default/held")
    ns = DEFAULT_NAMESPACE
    config_name = stack_objects.webhook_config_name(ns)
    h.api.put("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
              webhook_configuration(NAMES, ca_bundle=b"", name=config_name))
    h.start()
    try:
        h.run()
        h.fault("n1")
        h.run(lambda: h.phase("n1") == "Succeeded", seconds=600)
        assert h.phase("n1") == "Succeeded"
        assert h.api.read("/api/v1/namespaces/default/pods/held") is None  # deleted after the deadline
        # the recorder's aggregation: the same event again within its window patches the first
        for _ in range(2):
            h.recorder.emit(ObjectRef("Node", "n1", uid="u"), "MaintenanceRequired", "again")
        h.recorder.flush()
        assert LayoutGuard(h.kube, h.clock, namespace=ns, base="autoclusters-controller", shards=1).may_lead()
        # a guarded node patch that lost a race reads the node again
        stale = h.api.read("/api/v1/nodes/n1")
        assert stale is not None
        h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["labels"].update(team="research"))
        h.kube.patch_node_guarded(stale, lambda n: [] if n["metadata"]["resourceVersion"] != stale["metadata"][
            "resourceVersion"] else [{"op": "add", "path": "/metadata/labels/x", "value": "y"}])
        elector = LeaderElector(h.kube, h.clock, namespace=ns, name="autoclusters-controller", identity="a")
        assert elector.try_acquire_or_renew()  # the Lease created
        h.clock.advance(2)
        assert elector.try_acquire_or_renew()  # and renewed
        keeper = WebhookCertKeeper(h.kube, h.clock, namespace=ns, tls_secret=WEBHOOK_TLS_SECRET,
                                   ca_secret=WEBHOOK_CA_SECRET, config_name=config_name,
                                   hosts=["autoclusters-webhook.autoclusters-system.svc"], policy=CertPolicy())
        keeper.sync()  # the Secrets made
        h.clock.advance(91 * 86400)
        keeper.sync()  # renewed
        collector = type("C", (), {"kube": h.kube, "names": NAMES, "fleet": h.fleet, "clock": h.clock,
                                   "config": type("K", (), {"retention_days": 90.0})()})()
        assert Controller.collect_garbage(collector) == 1
    finally:
        h.stop()
    given = grants(stack_objects.rbac_objects(NAMES, ns, local=True), _subject(CONTROLLER_SERVICE_ACCOUNT))
    made = calls(h.api)
    assert ungranted(made, given) == []
    providers = {f"{v} {r.group or 'core'}/{r.resource}" for k in KINDS.values() for r in k.rbac for v in r.verbs}
    assert [u for u in unused(made, given) if u not in providers] == []

