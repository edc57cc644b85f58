"""``pulumi up`` end to end: the real Pulumi CLI and Kubernetes provider (built by
``tools/build-tools.sh pulumi``), a local file backend, the local cluster.

One stack goes through its whole life: up creates everything; a preview afterwards shows
no change; changing the pool's consent mode in the stack configuration and running up
again changes what the controller does with the next fault (repaired at once under
``auto``, proposed and held under ``propose``); destroy leaves nothing behind.

The stack gets its own domain and namespace, so its CRDs, pool objects, roles and
admission objects never meet another test's. The runtime processes (controller,
webhook) run on this host under the service accounts the stack created.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api
from autoclusters.clock import SystemClock, utc_iso
from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, WEBHOOK_SERVICE_ACCOUNT
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.tools import ToolsMissing
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from tests.integration.helpers import controller_decided, wait_for

pytestmark = pytest.mark.integration

XID79 = "GPU 3 reported Xid 79 (GPU has fallen off the bus)."


@pytest.fixture(scope="module")
def pulumi_tools() -> Any:
    from autoclusters.devcluster.pulumi_env import PulumiTools

    try:
        return PulumiTools.locate()
    except ToolsMissing as e:
        if os.environ.get("AUTOCLUSTERS_TEST_KUBECONFIG"):
            pytest.skip(f"the Pulumi binaries are not built on this machine: {e}")
        raise  # `make test` builds them: missing here is a broken setup, not a skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HostProcess:
    """One runtime process on the host under a service account's token."""

    def __init__(self, name: str, args: list[str], kubeconfig: str, env: dict[str, str], logs: Path) -> None:
        self.log = logs / f"{name}.log"
        self._out = self.log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "autoclusters.cli.main", *args, "--kubeconfig", kubeconfig],
                                     stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **env, "PYTHONUNBUFFERED": "1"})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


class StackRun:
    """The stack under test and what the test looks at in the cluster."""

    def __init__(self, cluster: ClusterHandle, tmp: Path, unique: str, *, automation: bool = True) -> None:
        """``automation``: drive the stack through the Automation API (``self.stack``);
        without it the caller runs the Pulumi CLI itself and uses the rest."""
        from autoclusters.devcluster import pulumi_env

        self.cluster, self.kube = cluster, cluster.kube
        self.names = Names(f"pul{unique}.autoclusters.test", "AutoClusters")
        self.namespace = f"acp-{unique}"
        self.pool = f"gpu{unique}"
        self.webhook_port = _free_port()
        self.work, self.state, self.logs = tmp / "work", tmp / "state", tmp / "logs"
        self.logs.mkdir(parents=True)
        self.procs: list[HostProcess] = []
        if automation:
            self.stack = pulumi_env.stack("e2e", self.work, self.state, self.config("auto"),
                                          kubeconfig=cluster.kubeconfig)
        self._write_config = pulumi_env.write_stack_config

    def config(self, mode: str) -> dict[str, Any]:
        return {
            "autoclusters:local": True,
            "autoclusters:namespace": self.namespace,
            "autoclusters:domain": self.names.domain,
            "autoclusters:kubeconfig": self.cluster.kubeconfig,
            "autoclusters:webhookUrl": f"https://127.0.0.1:{self.webhook_port}/validate",
            "autoclusters:pools": [{
                "name": self.pool, "consentMode": mode,
                "drain": {"resetDeadlineSeconds": 5, "replaceDeadlineSeconds": 5},
                "provider": {"type": "simulated", "simulated": {"resetSeconds": 1, "replaceSeconds": 1}},
                "nodes": {"backend": "simulated", "count": 2},
            }],
        }

    def set_mode(self, mode: str) -> None:
        """What a user or a GitOps pipeline does: edit ``Pulumi.<stack>.yaml``."""
        self._write_config(self.work, "e2e", self.config(mode))

    # --- cluster reads ------------------------------------------------------------------------
    def path(self, plural: str, name: str | None = None) -> str:
        return Kube.custom_path(self.names.api_group, api.VERSION, plural, name)

    def pool_object(self) -> dict[str, Any]:
        return self.kube.get(self.path("gpunodepools", self.pool))

    def records(self, node: str) -> list[dict[str, Any]]:
        return [r for r in self.kube.list_items(self.path("remediations")) if r["spec"]["node"] == node]

    def raise_fault(self, node: str) -> None:
        """Writes the fault condition the way the detector does."""
        self._condition(node, "True", "NvidiaXIDError", XID79)

    def clear_fault(self, node: str) -> None:
        """What the detector does after the reboot a reset causes: the driver state is gone."""
        self._condition(node, "False", "NoGpuFaultDetected", "No GPU fault detected.")

    def _condition(self, node: str, status: str, reason: str, message: str) -> None:
        now = utc_iso(SystemClock().now())
        self.kube.patch_node_status(node, {"status": {"conditions": [{
            "type": self.names.gpu_condition, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})

    def boot_id(self, node: str) -> str:
        return self.kube.get_node(node)["status"]["nodeInfo"]["bootID"]

    def leftovers(self) -> list[str]:
        """Every object this stack could have made that still exists."""
        found = []
        probes = {
            f"/api/v1/namespaces/{self.namespace}": "namespace",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpunodepools.{self.names.api_group}": "crd",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/remediations.{self.names.api_group}": "crd",
        }
        for suffix in ("autoclusters-webhook", "autoclusters-maintenance-labels"):
            name = f"{suffix}-{self.namespace}"
            probes[f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"] = "vwc"
            probes[f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}"] = "vap"
            probes[f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{name}"] = "vapb"
        for role in (f"autoclusters-controller-{self.namespace}", f"autoclusters-detector-{self.namespace}",
                     f"autoclusters-webhook-{self.namespace}"):
            probes[f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}"] = "clusterrole"
            probes[f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}"] = "clusterrolebinding"
        for path, what in probes.items():
            try:
                obj = self.kube.get(path)
            except NotFound:
                continue
            # A namespace being finalized is on its way out: wait for it rather than count it.
            if what == "namespace" and obj.get("status", {}).get("phase") == "Terminating":
                found.append(f"{what} (terminating)")
                continue
            found.append(f"{what} {path.rsplit('/', 1)[-1]}")
        found += [f"node {n['metadata']['name']}" for n in
                  self.kube.list_nodes(f"{self.names.pool_label}={self.pool}")]
        return found

    # --- host runtime -------------------------------------------------------------------------
    def start(self, name: str, args: list[str], service_account: str) -> HostProcess:
        kubeconfig = self.cluster.service_account_kubeconfig(self.namespace, service_account)
        env = {"AUTOCLUSTERS_DOMAIN": self.names.domain, "AUTOCLUSTERS_CONDITION_PREFIX": self.names.prefix,
               "AUTOCLUSTERS_NAMESPACE": self.namespace}
        proc = HostProcess(name, args, kubeconfig, env, self.logs)
        self.procs.append(proc)
        return proc

    def start_webhook(self) -> HostProcess:
        """The webhook on the host, serving the certificate the stack issued (read as the kubelet
        would mount it: the webhook's own identity has no API rights)."""
        secret = self.cluster.kube.get(f"/api/v1/namespaces/{self.namespace}/secrets/autoclusters-webhook-tls")
        tls = self.logs / "tls"
        tls.mkdir(exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            (tls / key).write_bytes(base64.b64decode(secret["data"][key]))
        proc = self.start("webhook", [
            "webhook", "run", "--listen", "127.0.0.1", "--port", str(self.webhook_port),
            "--opa-url", self.cluster.opa_url or "http://127.0.0.1:8181", "--no-push-opa-config",
            "--tls-cert", str(tls / "tls.crt"), "--tls-key", str(tls / "tls.key"), "--webhook-config", "",
        ], WEBHOOK_SERVICE_ACCOUNT)

        def serving() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.webhook_port), 0.5):
                return True
            assert proc.proc.poll() is None, f"the webhook exited:\n{proc.tail()}"
            return False

        wait_for("the webhook to listen", serving, timeout=30)
        return proc

    def start_controller(self) -> HostProcess:
        return self.start("controller", [
            "--verbose", "controller", "run", "--namespace", self.namespace, "--lease-seconds", "4",
            "--renew-deadline-seconds", "3", "--retry-period-seconds", "0.5", "--poll-seconds", "0.3",
            "--hold-recheck-seconds", "0.5", "--verify-timeout-seconds", "20", "--metrics-port", "0",
            "--sim-reset-seconds", "1", "--sim-replace-seconds", "1", "--resync-seconds", "20",
        ], CONTROLLER_SERVICE_ACCOUNT)

    def stop_all(self) -> None:
        for p in self.procs:
            p.stop()


@pytest.fixture()
def run(cluster: ClusterHandle, pulumi_tools: Any, tmp_path: Path, unique: str) -> Iterator[StackRun]:
    if not cluster.local:
        pytest.skip("the simulated pool's nodes need the local (kwok) cluster")
    r = StackRun(cluster, tmp_path, unique)
    try:
        yield r
    finally:
        r.stop_all()
        if r.leftovers():  # a failed test still cleans up after itself
            with contextlib.suppress(Exception):
                r.stack.destroy(on_output=lambda _: None)
        if os.environ.get("AUTOCLUSTERS_TEST_SHOW_LOGS"):
            for p in r.procs:
                print(p.tail(), file=sys.stderr)


def test_up_preview_consent_change_and_destroy(run: StackRun) -> None:
    out: list[str] = []
    t0 = time.monotonic()
    result = run.stack.up(on_output=out.append)
    up_seconds = time.monotonic() - t0
    assert result.summary.result == "succeeded", "".join(out[-40:])
    created = result.summary.resource_changes.get("create", 0)
    assert created >= 30, result.summary.resource_changes
    assert result.outputs["pools"].value == {run.pool: "auto"}

    # Everything is there: workloads (pods simulated by kwok on the pool's nodes), RBAC, admission, pool.
    kube, ns = run.kube, run.namespace
    nodes = sorted(n["metadata"]["name"] for n in kube.list_nodes(f"{run.names.pool_label}={run.pool}"))
    assert nodes == [f"{run.pool}-0", f"{run.pool}-1"]
    assert kube.get_node(nodes[0])["status"]["capacity"]["nvidia.com/gpu"] == "8"
    controller = kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/autoclusters-controller")
    assert controller["status"].get("readyReplicas") == 2
    # The DaemonSet is not awaited in local mode (other tests' nodes may be mid-repair); its pods
    # still come up on the pool's nodes.
    wait_for("detector pods on the pool's nodes",
             lambda: kube.get(f"/apis/apps/v1/namespaces/{ns}/daemonsets/autoclusters-detector")["status"]
             .get("numberReady", 0) >= 2, timeout=60)
    kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/autoclusters-controller")
    vwc = kube.get(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/autoclusters-webhook-{ns}")
    assert vwc["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{run.webhook_port}/validate"
    assert run.pool_object()["spec"]["consentMode"] == "auto"

    # A second look changes nothing.
    t0 = time.monotonic()
    preview = run.stack.preview(expect_no_changes=True, on_output=out.append)
    preview_seconds = time.monotonic() - t0
    assert set(preview.change_summary) == {"same"}, preview.change_summary

    # The runtime on the host, under the stack's service accounts.
    run.start_webhook()
    host_controller = run.start_controller()

    # auto: a fault is repaired without waiting for anyone.
    boot = run.boot_id(nodes[0])
    run.raise_fault(nodes[0])
    record = wait_for(f"a repair record for {nodes[0]}", lambda: next((r for r in run.records(nodes[0])
                                    if (r.get("status") or {}).get("steps")), None),
                      timeout=40)
    first = record["status"]["steps"][0]["phase"]
    assert record["spec"]["consentMode"] == "auto" and first == "Scheduled", record
    wait_for(f"{nodes[0]} to be reset", lambda: run.boot_id(nodes[0]) != boot, timeout=40)
    run.clear_fault(nodes[0])
    wait_for(f"the repair of {nodes[0]} to succeed",
             lambda: any((r.get("status") or {}).get("phase") == "Succeeded" for r in run.records(nodes[0])),
             timeout=40)

    # propose, through the stack configuration: the next fault is proposed and held.
    run.set_mode("propose")
    t0 = time.monotonic()
    result = run.stack.up(on_output=out.append)
    update_seconds = time.monotonic() - t0
    assert result.summary.resource_changes.get("update") == 1, result.summary.resource_changes
    assert result.outputs["pools"].value == {run.pool: "propose"}
    assert run.pool_object()["spec"]["consentMode"] == "propose"
    run.raise_fault(nodes[1])
    held = wait_for(f"a proposed repair of {nodes[1]}", lambda: next((r for r in run.records(nodes[1])
                                  if (r.get("status") or {}).get("phase") == "AwaitingApproval"), None),
                    timeout=40)
    assert held["spec"]["consentMode"] == "propose"
    # looked at again, unapproved (the controller's --verbose decision line): still held
    assert controller_decided(kube, nodes[1], lambda: [host_controller.log]).endswith(" AwaitingApproval")
    assert [r["status"]["phase"] for r in run.records(nodes[1])] == ["AwaitingApproval"]
    assert run.names.maintenance_required in kube.get_node(nodes[1])["metadata"]["labels"]
    assert not kube.get_node(nodes[1])["spec"].get("unschedulable")  # held: still running its work

    # destroy: nothing of the stack is left.
    run.stop_all()
    t0 = time.monotonic()
    result = run.stack.destroy(on_output=out.append)
    destroy_seconds = time.monotonic() - t0
    assert result.summary.result == "succeeded", "".join(out[-40:])
    wait_for("the stack's objects to be gone", lambda: not run.leftovers(), timeout=60)
    print(f"\npulumi timings: up {up_seconds:.1f}s, preview {preview_seconds:.1f}s, "
          f"consent update {update_seconds:.1f}s, destroy {destroy_seconds:.1f}s", file=sys.stderr)


def test_existing_nodes_get_the_pool_label_and_lose_it_on_destroy(cluster: ClusterHandle, pulumi_tools: Any,
                                                                  tmp_path: Path, unique: str) -> None:
    """The ``existing`` backend: nodes chosen by a selector are labelled with a server-side
    apply patch; destroy takes the label back off and leaves the nodes alone."""
    names = Names(f"pex{unique}.autoclusters.test", "AutoClusters")
    source_pool, pool = f"ex{unique}", f"gpu{unique}"
    made = cluster.create_gpu_nodes(source_pool, 2, prefix=source_pool)
    namespace = f"ace-{unique}"
    config = {
        "autoclusters:namespace": namespace, "autoclusters:domain": names.domain,
        "autoclusters:kubeconfig": cluster.kubeconfig, "autoclusters:local": True,
        "autoclusters:webhookUrl": f"https://127.0.0.1:{_free_port()}/validate",
        "autoclusters:pools": [{"name": pool, "consentMode": "off",
                                "nodes": {"selector": {cluster.names.pool_label: source_pool}}}],
    }
    try:
        _label_and_unlabel(cluster, names, pool, source_pool, made, config, tmp_path)
    finally:
        for node in made:
            with contextlib.suppress(NotFound):
                cluster.kube.delete(f"/api/v1/nodes/{node}")


def _label_and_unlabel(cluster: ClusterHandle, names: Names, pool: str, source_pool: str, made: list[str],
                       config: dict[str, Any], tmp_path: Path) -> None:
    from autoclusters.devcluster import pulumi_env

    stack = pulumi_env.stack("existing", tmp_path / "work", tmp_path / "state", config, kubeconfig=cluster.kubeconfig)
    out: list[str] = []
    try:
        result = stack.up(on_output=out.append)
        assert result.summary.result == "succeeded", "".join(out[-40:])
        labelled = sorted(n["metadata"]["name"] for n in cluster.kube.list_nodes(f"{names.pool_label}={pool}"))
        assert labelled == sorted(made)
        assert stack.preview(expect_no_changes=True, on_output=out.append).change_summary.keys() == {"same"}
    finally:
        result = stack.destroy(on_output=out.append)
    assert result.summary.result == "succeeded", "".join(out[-40:])
    for node in made:
        labels = cluster.kube.get_node(node)["metadata"]["labels"]
        assert names.pool_label not in labels  # the stack's label is gone ...
        assert labels[cluster.names.pool_label] == source_pool  # ... and the node and its own labels stay
