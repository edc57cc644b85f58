"""The local cluster's real nodes (kubelet, containerd, kube-proxy: devcluster/realnodes.py):
the shipped image runs there as pods, Services route between nodes and to the API server, and
the shipped reboot Job enters the node's host namespaces and reboots it.

On kwok nodes no container ever starts, so none of this could be seen before: the reboot Job
"succeeded" there without running, which hid that a privileged container under the image's
user has no capability to enter the host (issue 23).
"""

from __future__ import annotations

import contextlib
import ipaddress
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.clock import SystemClock
from autoclusters.deploy import DEFAULT_IMAGE
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.node_init import REBOOT_VERB
from autoclusters.devcluster.realnodes import REAL_NODE_LABEL, RealNode
from autoclusters.kube import Conflict, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers import hostreboot
from autoclusters.providers.hostreboot import HostRebootProvider, boot_id, job_name
from autoclusters.providers.types import Operation, ProviderState
from tests.integration.helpers import kubectl


@pytest.fixture(scope="module")
def nodes(real_cluster: ClusterHandle) -> list[RealNode]:
    assert real_cluster.dev is not None
    found = real_cluster.dev.real_nodes()
    assert len(found) == 2
    return found


@pytest.fixture()
def namespace(real_cluster: ClusterHandle) -> Iterator[str]:
    ns = f"real-{uuid.uuid4().hex[:8]}"
    real_cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    deadline = time.monotonic() + 30
    while True:  # the ServiceAccount controller makes "default"; a pod cannot be created before
        with contextlib.suppress(NotFound):
            real_cluster.kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            break
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.2)
    yield ns
    with contextlib.suppress(NotFound):
        real_cluster.kube.delete(f"/api/v1/namespaces/{ns}")


def _pod(name: str, node: str, command: list[str], labels: dict[str, str] | None = None,
         restart: str = "Never") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": DEFAULT_IMAGE, "command": command}]}}


def _wait_phase(cluster: ClusterHandle, ns: str, name: str, phases: set[str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        pod = cluster.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        phase = (pod.get("status") or {}).get("phase")
        if phase in phases:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {ns}/{name} is {phase}, not {sorted(phases)}, after {timeout}s: "
                                 f"{pod.get('status')}")
        time.sleep(0.3)


_VERSION = ("import json, os, ssl, urllib.request\n"
            "sa = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
            "ctx = ssl.create_default_context(cafile=sa + 'ca.crt')\n"
            "url = f\"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version\"\n"
            "req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + open(sa + 'token').read()})\n"
            "print('api', json.load(urllib.request.urlopen(req, context=ctx, timeout=10))['gitVersion'])\n")


def test_the_shipped_image_runs_as_pods_and_services_reach_across_nodes(
        real_cluster: ClusterHandle, nodes: list[RealNode], namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    kube = real_cluster.kube
    for node in nodes:
        obj = kube.get_node(node.name)
        assert obj["metadata"]["labels"][REAL_NODE_LABEL] == "true" and node_ready(obj)
        internal = [a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP"]
        assert internal == [node.ip] and not ipaddress.ip_address(node.ip).is_loopback
        assert obj["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    server, client = nodes
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # a web server on one node behind a Service, reached by its ClusterIP from a pod on the other
    kube.create(pods, _pod("web", server.name, ["python3", "-m", "http.server", "8080", "--directory", "/etc"],
                           labels={"app": "web"}))
    svc = kube.create(f"/api/v1/namespaces/{namespace}/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    web = _wait_phase(real_cluster, namespace, "web", {"Running"})
    assert ipaddress.ip_address(web["status"]["podIP"]) in ipaddress.ip_network(server.pod_cidr)
    cluster_ip = svc["spec"]["clusterIP"]
    fetch = (f"{_VERSION}import time\n"
             "for attempt in range(100):  # until kube-proxy has programmed the new Service\n"
             "    try:\n"
             f"        body = urllib.request.urlopen('http://{cluster_ip}/os-release', timeout=2).read().decode()\n"
             "        break\n"
             "    except OSError:\n"
             "        time.sleep(0.2)\n"
             "print('web', body.splitlines()[0])\n")
    kube.create(pods, _pod("client", client.name, ["python3", "-c", fetch]))
    done = _wait_phase(real_cluster, namespace, "client", {"Succeeded", "Failed"})
    with capsys.disabled():  # in the suite's output, passed or not: the pods ran on the real nodes
        print("\n" + kubectl(real_cluster.kubeconfig, "get", "pods", "-o", "wide", "-n", namespace), file=sys.stderr)
    logs = kubectl(real_cluster.kubeconfig, "logs", "-n", namespace, "client")  # through the kubelet's API
    assert done["status"]["phase"] == "Succeeded", logs
    assert "api v1.34" in logs  # the `kubernetes` Service, with the pod's own token and CA
    assert "web PRETTY_NAME=" in logs  # a Service on the other node
    assert ipaddress.ip_address(done["status"]["podIP"]) in ipaddress.ip_network(client.pod_cidr)


def _reset(cluster: ClusterHandle, node: RealNode, namespace: str, timeout: float = 120) -> tuple[Any, Operation]:
    """One reset of ``node`` through the shipped provider, its Job and the shipped command path;
    only the host's last word is the local node's (node_init.REBOOT_VERB for `systemctl reboot`)."""
    kube = cluster.kube
    provider = HostRebootProvider(kube, SystemClock(), Names(), namespace=namespace, image=DEFAULT_IMAGE,
                                  timeout=timeout, host_command=tuple(shlex.split(REBOOT_VERB)))
    before = boot_id(kube.get_node(node.name))
    op = Operation(f"real-{uuid.uuid4().hex[:8]}", RepairAction.RESET, SystemClock().now(), boot_id_before=before)

    def lookup(name: str) -> dict[str, Any] | None:
        try:
            return kube.get_node(name)
        except NotFound:
            return None

    deadline = time.monotonic() + timeout + 30
    while time.monotonic() < deadline:
        view = provider.progress(op, node.name, "real", lookup)
        if view.state in (ProviderState.SUCCEEDED, ProviderState.FAILED):
            return view, op
        if view.state == ProviderState.NOT_STARTED:
            with contextlib.suppress(Conflict):
                provider.drive(op, node.name, "real")
        time.sleep(0.5)
    raise AssertionError(f"the reset of {node.name} neither succeeded nor failed in {timeout + 30}s")


def test_the_shipped_reboot_job_enters_the_nodes_host_and_reboots_it(
        real_cluster: ClusterHandle, nodes: list[RealNode], namespace: str) -> None:
    node = nodes[1]
    kube = real_cluster.kube
    before = boot_id(kube.get_node(node.name))
    log = real_cluster.dev.logs / f"machine-{node.name}.log" if real_cluster.dev else None
    assert log is not None
    downs = log.read_text().count("went down (init exited 3)")
    view, op = _reset(real_cluster, node, namespace)
    assert view.state == ProviderState.SUCCEEDED, view.message
    after = kube.get_node(node.name)
    assert boot_id(after) not in ("", before) and node_ready(after)
    # the node's init asked for the reboot: the Job's command reached PID 1 of that node's host
    assert log.read_text().count("went down (init exited 3)") == downs + 1
    with pytest.raises(NotFound):  # a Job that did its work is deleted
        kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job_name(op)}")


def test_a_reboot_job_without_root_cannot_enter_the_host(
        real_cluster: ClusterHandle, nodes: list[RealNode], namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the shipped Job was before issue 23: privileged, but under the image's user
    (65532), so its container keeps no capability and nsenter is refused. The provider says so,
    and the node keeps its boot."""
    monkeypatch.setattr(hostreboot, "REBOOT_SECURITY_CONTEXT", {"privileged": True})
    node = nodes[0]
    before = boot_id(real_cluster.kube.get_node(node.name))
    view, _op = _reset(real_cluster, node, namespace, timeout=60)
    assert view.state == ProviderState.FAILED
    assert "nsenter" in view.message and "Permission denied" in view.message, view.message
    assert boot_id(real_cluster.kube.get_node(node.name)) == before
