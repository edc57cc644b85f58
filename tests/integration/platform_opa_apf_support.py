"""The platform faults of test_platform_opa_apf.py: a real OPA server of the test's own that
can be frozen (SIGSTOP: it keeps its listening socket, the kernel takes connections, nothing
answers), the webhook in front of it, API Priority and Fairness objects that throttle one
identity, and the metrics both sides export."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoclusters.devcluster.cluster import opa_load_args
from autoclusters.devcluster.handle import ClusterHandle
from autoclusters.devcluster.processes import free_port
from autoclusters.kube import Kube, NotFound, Throttled
from autoclusters.rego import opa
from autoclusters.rego.policy_data import controller_identity
from tests.integration.controller_support import Env

FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


class FreezableOpa:
    """``opa run --server`` with the project's policies, on a port of its own."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("ab")
        self.proc = subprocess.Popen([str(opa.opa_binary()), "run", "--server", f"--addr=127.0.0.1:{self.port}",
                                      "--log-level=error", *opa_load_args(opa.policies_dir())],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    break
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, "OPA did not start"
                time.sleep(0.1)
        self.frozen = False

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self.frozen = False

    def close(self) -> None:
        if self.frozen:
            self.thaw()
        self.proc.kill()
        self.proc.wait(10)
        self._log.close()


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` (Prometheus text) whose labels include ``labels``."""
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, flags=re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m[1] or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m[2])
    return total


def scrape(url: str, context: Any = None) -> str:
    with urllib.request.urlopen(url, timeout=10, context=context) as r:
        return str(r.read().decode())


def apiserver_metrics(kube: Kube) -> str:
    return str(kube.request("GET", "/metrics", stream=True).read_all().decode())


# --- API Priority and Fairness ---------------------------------------------------------------------
def controller_username(env: Env) -> str:
    return controller_identity(env.namespace)


def throttle_objects(env: Env, name: str, *, shares: int) -> list[dict[str, Any]]:
    """A priority level with a tiny share that cannot borrow, one queue of one, and a flow
    schema sending every request of the controller's service account to it, ahead of the
    cluster's own schemas (precedence 100; the suggested ones start at 500, the exempt at 1)."""
    return [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
         "metadata": {"name": name},
         "spec": {"type": "Limited", "limited": {
             "nominalConcurrencyShares": shares, "lendablePercent": 0, "borrowingLimitPercent": 0,
             "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
         "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                      "namespace": env.namespace, "name": "autoclusters-controller"}}],
                      "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                         "clusterScope": True, "namespaces": ["*"]}],
                      "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}},
    ]


def priority_level_of(kube: Kube) -> str | None:
    """The UID of the priority level the API server classified a GET of one node by ``kube``'s
    identity into (the ``X-Kubernetes-PF-PriorityLevel-UID`` header of every answer it lets
    through); None when the request was throttled (it names none then)."""
    try:
        # the lean transport's own call: it keeps the headers
        resp = kube._api.send("GET", "/api/v1/nodes", [("limit", 1)], None, None, 10, False)
    except Throttled:
        return None
    return str(resp.headers.get("x-kubernetes-pf-prioritylevel-uid", ""))


@contextlib.contextmanager
def throttled(cluster: ClusterHandle, env: Env, sa_kube: Kube, name: str, *, shares: int) -> Iterator[str]:
    """The controller's identity throttled while inside; yields the priority level's UID, once
    the API server classifies the identity's requests into it. Removed after, and proven gone
    (the identity's requests classified elsewhere again)."""
    objs = throttle_objects(env, name, shares=shares)
    cluster.apply(objs)
    try:
        uid = cluster.kube.get(f"{FLOWCONTROL}/prioritylevelconfigurations/{name}")["metadata"]["uid"]
        deadline = time.monotonic() + 30
        while priority_level_of(sa_kube) != uid:
            assert time.monotonic() < deadline, "the API server never classified the controller into the level"
            time.sleep(0.2)
        yield uid
    finally:
        for kind in ("flowschemas", "prioritylevelconfigurations"):
            with contextlib.suppress(NotFound):
                cluster.kube.delete(f"{FLOWCONTROL}/{kind}/{name}")
        deadline = time.monotonic() + 30
        while priority_level_of(sa_kube) in (uid, None):
            assert time.monotonic() < deadline, "the throttling outlived its objects"
            time.sleep(0.2)
