"""The webhook's OPA sidecar as deployed: the real OPA binary, started with the Deployment's
own arguments on the policy ConfigMap laid out as the kubelet mounts one, for an installation
under another domain. Its configuration (``data.autoclusters.config``) must hold from OPA's
own start, so an OPA-only restart (the sidecar's container restarted, the webhook not) keeps
it: the webhook pushes it only when the webhook starts (issue 25, item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoclusters.deploy import stack, workloads
from autoclusters.devcluster.processes import free_ports
from autoclusters.names import Names
from autoclusters.rego import opa
from tests.conftest import tool_missing

NAMES = Names(domain="crusoe.ai")
NAMESPACE = "gpu-ops"


def _objects() -> list[dict[str, Any]]:
    return stack.webhook_objects(NAMES, NAMESPACE, "img:1", "opa:1")


def _mount(configmap: dict[str, Any], where: Path) -> Path:
    """The ConfigMap as the kubelet's atomic writer lays it out: the files in a hidden
    timestamped directory, ``..data`` linking to it, and one link per key at the top."""
    stamp = where / "..2026_12_01_22_00_00.000000001"
    stamp.mkdir(parents=True)
    for key, text in configmap["data"].items():
        (stamp / key).write_text(text)
    (where / "..data").symlink_to(stamp.name)
    for key in configmap["data"]:
        (where / key).symlink_to(f"..data/{key}")
    return where


class Sidecar:
    """OPA run with the sidecar container's arguments, its mount and ports moved to this host."""

    def __init__(self, mount: Path, args: list[str]) -> None:
        try:
            self.binary = str(opa.opa_binary())
        except opa.OpaError as e:
            tool_missing(str(e))
        self.port, self.diag = free_ports(2)
        self.container_args = args
        self.args = [a.replace("/policies", str(mount))
                     .replace(f"127.0.0.1:{workloads.OPA_PORT}", f"127.0.0.1:{self.port}")
                     .replace(f"0.0.0.0:{workloads.OPA_DIAGNOSTIC_PORT}", f"127.0.0.1:{self.diag}") for a in args]
        assert str(mount) in self.args and f"--addr=127.0.0.1:{self.port}" in self.args, self.args
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([self.binary, *self.args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"OPA exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("OPA did not start")

    def kill(self) -> None:
        """As a container's restart ends it: no shutdown of its own to rely on."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def post(self, path: str, body: Any) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as r:
            return json.load(r)


def _approval_of_a_healthy_node() -> dict[str, Any]:
    """A user approving a node that needs no repair, under this installation's domain."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Node"}, "operation": "UPDATE",
        "resource": {"group": "", "version": "v1", "resource": "nodes"}, "subResource": "status",
        "userInfo": {"username": "system:node:gpu-1"},
        "oldObject": {"metadata": {"name": "gpu-1", "labels": {}}},
        "object": {"metadata": {"name": "gpu-1", "labels": {NAMES.maintenance_approved: "true"}}}}}


def _decide(sidecar: Sidecar) -> dict[str, Any]:
    return dict(sidecar.post("/v1/data/autoclusters/admission/decision", {"input": _approval_of_a_healthy_node()})
                ["result"])


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    objs = _objects()
    configmap = next(o for o in objs if o["kind"] == "ConfigMap")
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    (opa_container,) = (c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "opa")
    (mount,) = (m["mountPath"] for m in opa_container["volumeMounts"] if m["name"] == "policies")
    assert mount == "/policies"
    s = Sidecar(_mount(configmap, tmp_path / "policies"), opa_container["args"])
    yield s
    if s.proc is not None:
        s.kill()


def test_the_sidecar_starts_on_the_mounted_configmap_with_this_installations_names(sidecar: Sidecar) -> None:
    sidecar.start()
    assert sidecar.get("/v1/data/autoclusters/config")["result"] == {
        "domain": "crusoe.ai", "controllers": [f"system:serviceaccount:{NAMESPACE}:autoclusters-controller"],
        "nodeGroups": ["system:nodes"], "nodeAgents": [f"system:serviceaccount:{NAMESPACE}:autoclusters-detector"],
        "allowLists": {"commands": {}, "images": {}, "urls": {}}}
    d = _decide(sidecar)
    assert d["allowed"] is False and [v["rule"] for v in d["violations"]] == ["maintenance-approved-requires-fault"]


def test_an_opa_only_restart_keeps_the_configuration(sidecar: Sidecar) -> None:
    """Killed and started again with nothing pushed: the crusoe.ai rules still hold. (Without
    the data document the rules would read the default domain's labels and allow this.)"""
    sidecar.start()
    assert _decide(sidecar)["allowed"] is False
    sidecar.kill()
    sidecar.start()
    assert sidecar.get("/v1/data/autoclusters/config")["result"]["domain"] == "crusoe.ai"
    d = _decide(sidecar)
    assert d["allowed"] is False and [v["rule"] for v in d["violations"]] == ["maintenance-approved-requires-fault"]


def test_without_the_data_document_the_same_review_would_pass(tmp_path: Path, sidecar: Sidecar) -> None:
    """Why the document must be there from OPA's start: the rules' defaults name another domain."""
    data = dict(next(o for o in _objects() if o["kind"] == "ConfigMap")["data"])
    del data[workloads.POLICY_DATA_FILE]
    bare = Sidecar(_mount({"data": data}, tmp_path / "bare"), sidecar.container_args)
    bare.start()
    try:
        assert _decide(bare)["allowed"] is True
    finally:
        bare.kill()


def test_the_configmaps_data_document_is_what_the_webhook_pushes() -> None:
    """One document, two ways into OPA: the ConfigMap's file and the webhook's push at its start
    (``webhook run`` with the Deployment's environment)."""
    from autoclusters.deploy.admission import default_node_agents
    from autoclusters.rego.policy_data import PolicyConfig, controller_identity

    data = next(o for o in _objects() if o["kind"] == "ConfigMap")["data"]
    pushed = PolicyConfig(NAMES, (controller_identity(NAMESPACE),), tuple(default_node_agents(NAMESPACE))
                          ).data_document()
    assert json.loads(data[workloads.POLICY_DATA_FILE]) == pushed
    assert os.path.splitext(workloads.POLICY_DATA_FILE)[1] == ".json"  # OPA loads .json files as data


def test_a_configmap_mount_without_the_ignore_fails_to_start(tmp_path: Path, sidecar: Sidecar) -> None:
    """Why ``--ignore=..*`` is in the sidecar's arguments: the kubelet's hidden directories hold
    every module a second and a third time."""
    args = [a for a in sidecar.args if a != "--ignore=..*"]
    assert len(args) == len(sidecar.args) - 1
    proc = subprocess.run([sidecar.binary, *args], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode != 0 and "redeclared" in proc.stdout + proc.stderr
