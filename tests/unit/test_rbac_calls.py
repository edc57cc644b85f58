"""Each identity's RBAC rules are the calls its code makes, no more and no fewer
(tests/unit/rbac_calls.py reads the fake API server's request log as the authorizer would).
Each case runs the identity's real code over ``FakeApi`` through the paths that make each kind
of call, then compares: a call no rule grants fails (the code drifted past its role), and so
does a rule no call used (the role drifted past the code)."""

from __future__ import annotations

import datetime as dt
import functools
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
    from autoclusters.kube import loader

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

    monkeypatch.setattr(loader, "load_kube", no_client)
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
    from autoclusters.detector.agent_config import AgentConfig
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
    leader election, the webhook's certificate, the collection of old records and the storage
    migration. Its calls are
    all granted (the simulated provider's rights with them: a local installation's); and every
    rule but the providers' is used. Each provider with rules has its own case below; the
    command provider has none."""
    from autoclusters.controller.manager import Controller
    from autoclusters.controller.own_image import own_image
    from autoclusters.controller.shards import LayoutGuard
    from autoclusters.controller.storage_migration import CRDS_PATH, migrate_storage
    from autoclusters.controller.webhook_certs import WebhookCertKeeper
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.admission import webhook_configuration
    from autoclusters.deploy.crds import crds
    from autoclusters.deploy.providers import KINDS
    from autoclusters.deploy.workloads import CONTROLLER_CONTAINER, WEBHOOK_CA_SECRET, WEBHOOK_TLS_SECRET
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
        # the storage migration after an upgrade: each object written back, the CRDs' storedVersions trimmed
        for crd in crds(NAMES):
            h.api.put(CRDS_PATH, {**crd, "status": {"storedVersions": [*api.OLD_VERSIONS, api.VERSION]}})
        assert all(m.trimmed and m.rewritten for m in migrate_storage(h.kube, NAMES, h.recorder))
        collector = type("C", (), {"kube": h.kube, "names": NAMES, "fleet": h.fleet, "clock": h.clock,
                                   "config": type("K", (), {"retention_days": 90.0})()})()
        assert Controller.collect_garbage(collector) == 1
        # its own pod, for the image of the Jobs it starts (controller/own_image.py)
        h.api.put(f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                    "metadata": {"name": "ctl-0", "namespace": ns},
                                                    "spec": {"containers": [{"name": CONTROLLER_CONTAINER,
                                                                             "image": "ac:1"}]}})
        assert own_image(h.kube, ns, "ctl-0", CONTROLLER_CONTAINER) == "ac:1"
    finally:
        h.stop()
    given = grants(stack_objects.rbac_objects(NAMES, ns, local=True), _subject(CONTROLLER_SERVICE_ACCOUNT))
    made = calls(h.api)
    assert ungranted(made, given) == []
    providers = {f"{v} {r.group or 'core'}/{r.resource}" + (f" {sorted(r.names)}" if r.names else "")
                 for k in KINDS.values() for r in k.rbac for v in r.verbs}
    assert [u for u in unused(made, given) if u not in providers] == []



def _provider_grants(kind: Any, namespace: str) -> set[Any]:
    from tests.unit.rbac_calls import Grant

    return {Grant(r.group, r.resource, v, namespace if r.namespaced else None, frozenset(r.names))
            for r in kind.rbac for v in r.verbs}


def test_the_cluster_api_providers_rules_are_its_calls() -> None:
    """A reset and a replacement (both delete the Machine; a new node of the pool matched), as
    tests/unit/controller/test_clusterapi.py drives them: self-hosted (the Machines in the
    controller's own cluster), and with the Machines in a management cluster (the kubeconfig
    Secret read in the controller's namespace; in the management cluster the kubeconfig's
    identity asks what ``MACHINE_RULES`` grants, no more)."""
    from autoclusters.api import RepairAction
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.providers import KINDS, ProviderType
    from autoclusters.providers.clusterapi import MACHINE_RULES
    from autoclusters.providers.types import Operation
    from tests.unit.controller.test_clusterapi import NS, TwoClusters, World
    from tests.unit.rbac_calls import Grant

    made: set[Any] = set()
    two = TwoClusters()
    two.secret()
    for w in (World(), two):
        w.node("old", "m-old")
        w.node("other", "m-other")
        w.clock.advance(5)
        reset = Operation("r-1", RepairAction.RESET, w.clock.now())
        w.step(reset, "other")
        w.step(reset, "other")
        replace = Operation("r-2", RepairAction.REPLACE, w.clock.now())
        w.step(replace, "old")
        w.clock.advance(5)
        w.node("new", "m-new")
        w.api.remove("/api/v1/nodes/old")
        w.step(replace, "old")
        made |= calls(w.api)
    # the controller installed in namespace NS, where the Secret of TwoClusters is
    own = grants(stack_objects.rbac_objects(NAMES, NS), f"{NS}:{CONTROLLER_SERVICE_ACCOUNT}")
    mine = _provider_grants(KINDS[ProviderType.CLUSTERAPI], NS)
    assert ungranted(made, own) == []
    assert unused(made, mine) == []
    management = {Grant(r.group, r.resource, v, None, frozenset()) for r in MACHINE_RULES for v in r.verbs}
    assert ungranted(calls(two.management), management) == []
    assert unused(calls(two.management), management) == []


def test_the_karpenter_providers_rules_are_its_calls() -> None:
    """Two replacements through a stand-in for Karpenter (tests/unit/providers/
    test_karpenter_requests.py): one node naming its NodeClaim in its owner references (read by
    name), one that does not (the claims listed)."""
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.providers import KINDS, ProviderType
    from tests.unit.controller.harness import ROW_REMAP_FAILURE
    from tests.unit.providers.test_karpenter_requests import harness

    h = harness(terminate_after=4, launch_after=6)
    h.api.edit("/api/v1/nodes/k2", lambda n: n["metadata"].pop("ownerReferences"))
    h.start()
    try:
        h.run()
        for node in ("k1", "k2"):
            h.fault(node, ROW_REMAP_FAILURE)
            h.run(functools.partial(lambda n: h.phase(n) == "Succeeded", node), seconds=300)
            assert h.phase(node) == "Succeeded"
    finally:
        h.stop()
    own = grants(stack_objects.rbac_objects(NAMES, DEFAULT_NAMESPACE), _subject(CONTROLLER_SERVICE_ACCOUNT))
    made = calls(h.api)
    assert ungranted(made, own) == []
    assert unused(made, _provider_grants(KINDS[ProviderType.KARPENTER], DEFAULT_NAMESPACE)) == []


def test_the_host_reboot_providers_rules_are_its_calls() -> None:
    """A reboot Job created, polled, and deleted once the node is back with a new boot id; and
    a failed one, whose pod is read for its exit status (tests/unit/providers/
    test_hostreboot_command.py drives them the same way)."""
    from autoclusters.api import RepairAction
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.providers import KINDS, ProviderType
    from autoclusters.providers.hostreboot import HostRebootProvider
    from autoclusters.providers.types import Operation
    from tests.unit.providers.test_hostreboot_command import NS, _failed_job

    clock = FakeClock()
    fake = FakeApi(clock=clock.now)
    for n in ("a", "b"):
        fake.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
                                   "status": {"nodeInfo": {"bootID": "boot-1"},
                                              "conditions": [{"type": "Ready", "status": "True"}]}})
    ns = DEFAULT_NAMESPACE
    assert ns == NS  # where _failed_job writes the Job controller's verdict
    provider = HostRebootProvider(fake.kube(), clock, NAMES, namespace=ns, image="img:1", timeout=600)

    def progress(op: Operation, node: str) -> Any:
        return provider.progress(op, node, "p", lambda name: fake.read(f"/api/v1/nodes/{name}"))

    ok = Operation("rec-a", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    provider.drive(ok, "a", "p")
    progress(ok, "a")
    fake.edit("/api/v1/nodes/a", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    assert progress(ok, "a").state.name == "SUCCEEDED"  # and its Job deleted
    failed = Operation("rec-b", RepairAction.RESET, clock.now(), boot_id_before="boot-1")
    provider.drive(failed, "b", "p")
    _failed_job(fake, failed, provider, "b", {"exitCode": 1, "message": "reboot: Operation not permitted"})
    assert progress(failed, "b").state.name == "FAILED"
    own = grants(stack_objects.rbac_objects(NAMES, ns), _subject(CONTROLLER_SERVICE_ACCOUNT))
    made = calls(fake)
    assert ungranted(made, own) == []
    assert unused(made, _provider_grants(KINDS[ProviderType.HOST_REBOOT], ns)) == []


def test_the_simulated_providers_rules_are_its_calls() -> None:
    """A reset that fails escalates to a replacement: a new kwok node made (its status posted as
    its kubelet would), the old one deleted (tests/unit/controller/test_reconciler.py's case).
    Its rules are a local installation's only."""
    from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT
    from autoclusters.deploy.providers import KINDS, ProviderType
    from tests.unit.controller.harness import Harness

    h = Harness()
    h.pool()
    h.node("n1")
    h.api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update(
        {"sim.autoclusters.io/fail-reset": "true"}))
    h.start()
    try:
        h.run()
        h.fault("n1")
        h.run(lambda: h.phase("n1") == "Succeeded", seconds=120)
        assert h.records("n1")[0]["status"]["action"] == "replace" and h.node_obj("n1") is None
    finally:
        h.stop()
    own = grants(stack_objects.rbac_objects(NAMES, DEFAULT_NAMESPACE, local=True),
                 _subject(CONTROLLER_SERVICE_ACCOUNT))
    made = calls(h.api)
    assert ungranted(made, own) == []
    assert unused(made, _provider_grants(KINDS[ProviderType.SIMULATED], DEFAULT_NAMESPACE)) == []
