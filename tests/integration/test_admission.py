"""The maintenance-label contract enforced by the real API server, with the real kubectl.

Two layers are exercised separately so each is proven on its own:

- ``webhook``: the OPA-backed webhook (running on this host) with the CEL floor unbound;
- ``floor``: the webhook stopped and its configuration removed, the CEL floor bound.

Everything this module installs is uniquely named and scoped to the nodes it creates (a
scope label on those nodes, matched by the binding's and the webhook's object selectors),
and removed at the end, so other tests on the same cluster are not affected.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from autoclusters.deploy.admission import (
    admission_policy,
    admission_policy_binding,
    webhook_configuration,
)
from autoclusters.kube import Conflict, NotFound
from tests.integration.helpers import kubectl_binary

KUBECTL = kubectl_binary()  # the one built with the control plane, $KUBECTL, or PATH; none is an error
SCOPE_LABEL = "admission-test.autoclusters.io/scope"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
WEBHOOK_MARK = 'admission webhook "maintenance-labels.remediation.autoclusters.io" denied the request'
FLOOR_MARK = "ValidatingAdmissionPolicy"



def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KUBECTL, f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Admission:
    """The test's own copy of the admission layers, switched between modes."""

    def __init__(self, cluster: Any, workdir: Path) -> None:
        self.cluster = cluster
        self.kube = cluster.kube
        self.names = cluster.names
        self.suffix = secrets.token_hex(3)
        self.scope = {"matchLabels": {SCOPE_LABEL: self.suffix}}
        self.workdir = workdir
        self.policy_name = f"adm-test-{self.suffix}"
        self.webhook_name = f"adm-test-{self.suffix}"
        self.namespace = f"adm-test-{self.suffix}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = _free_port()
        self.mode = ""
        self.nodes: list[str] = []
        self.probe = ""  # a node for wait_enforced, made by the fixture once the identities exist
        # where the webhook process asks OPA, its environment (its names) and the controller
        # identities its configuration exempts (None: the defaults of the system's namespace)
        self.opa_url: str = cluster.opa_url or ""
        self.webhook_env: dict[str, str] | None = None
        self.webhook_args: list[str] = []
        self.controllers: list[str] | None = None

    # --- identities -------------------------------------------------------------------------
    def setup_identities(self) -> None:
        role = f"adm-test-node-writer-{self.suffix}"
        self.cluster.apply([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
             "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"],
                        "verbs": ["get", "list", "watch", "patch", "update", "create", "delete"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
             "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": self.namespace},
                          {"kind": "ServiceAccount", "name": "autoclusters-controller",
                           "namespace": "autoclusters-system"}]},
        ])
        self.user = self.cluster.service_account_kubeconfig(self.namespace, "alice")
        self.controller = self.cluster.service_account_kubeconfig("autoclusters-system", "autoclusters-controller")

    def kubelet_kubeconfig(self, node: str) -> str:
        """A kubeconfig holding a client certificate for ``system:node:<node>`` in ``system:nodes``
        (issued through the CSR API), i.e. what a kubelet registering that node uses."""
        key = ec.generate_private_key(ec.SECP256R1())
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])).sign(key, hashes.SHA256())
        path = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
        name = f"adm-test-{node}"
        obj = self.kube.create(path, {
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
            "spec": {"request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["digital signature", "client auth"], "expirationSeconds": 3600}})
        try:
            for _ in range(10):  # the CSR may change between our read and our approval
                obj["status"] = {"conditions": [{"type": "Approved", "status": "True", "reason": "AdmissionTest",
                                                 "message": "kubelet identity for an admission test"}]}
                try:
                    self.kube.replace(f"{path}/{name}/approval", obj)
                    break
                except Conflict:
                    obj = self.kube.get(f"{path}/{name}")
            deadline = time.monotonic() + 30
            while not (cert := (self.kube.get(f"{path}/{name}").get("status") or {}).get("certificate")):
                assert time.monotonic() < deadline, "the CSR was not signed"
                time.sleep(0.2)
        finally:
            with contextlib.suppress(NotFound):
                self.kube.delete(f"{path}/{name}")
        admin = yaml.safe_load(Path(self.cluster.kubeconfig).read_text())
        ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == ctx["cluster"])
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        cfg = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
               "users": [{"name": node, "user": {"client-certificate-data": cert,
                                                 "client-key-data": base64.b64encode(key_pem).decode()}}],
               "contexts": [{"name": node, "context": {"cluster": cluster["name"], "user": node}}],
               "current-context": node}
        out = self.workdir / f"kubelet-{node}.kubeconfig"
        out.write_text(yaml.safe_dump(cfg))
        out.chmod(0o600)
        return str(out)

    def new_node(self) -> str:
        (name,) = self.cluster.create_gpu_nodes(f"adm{self.suffix}", 1)
        self.kube.patch_node(name, {"metadata": {"labels": {SCOPE_LABEL: self.suffix}}})
        self.nodes.append(name)
        return name

    # --- layers ---------------------------------------------------------------------------
    def floor_on(self) -> None:
        self.cluster.apply([admission_policy(self.names, name=self.policy_name),
                            admission_policy_binding(policy_name=self.policy_name, name=self.policy_name,
                                                     node_selector=self.scope)])

    def floor_off(self) -> None:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(NotFound):
                self.kube.delete(f"{ADMISSION}/{kind}/{self.policy_name}")

    def webhook_start(self, *, cert_dir: Path | None = None, apply_config: bool = True) -> None:
        cert_dir = cert_dir or self.workdir / "certs"
        log = open(self.workdir / "webhook.log", "ab")  # noqa: SIM115 - handed to the child process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autoclusters.cli.main", "webhook", "run", "--listen", "127.0.0.1",
             "--port", str(self.port), "--opa-url", self.opa_url, "--cert-dir", str(cert_dir),
             "--hosts", "127.0.0.1", "--kubeconfig", self.cluster.kubeconfig, "--webhook-config", self.webhook_name,
             *self.webhook_args],
            stdout=log, stderr=subprocess.STDOUT, env=self.webhook_env)
        deadline = time.monotonic() + 30
        import ssl

        while time.monotonic() < deadline:
            if (cert_dir / "ca.crt").exists():
                try:
                    ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
                    with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", timeout=1, context=ctx):
                        break
                except OSError:
                    pass
            assert self.proc.poll() is None, (self.workdir / "webhook.log").read_text()
            time.sleep(0.2)
        else:
            raise TimeoutError("webhook not ready")
        if apply_config:
            self.apply_webhook_config((cert_dir / "ca.crt").read_bytes())

    def apply_webhook_config(self, ca_bundle: bytes) -> None:
        self.cluster.apply(webhook_configuration(
            self.names, ca_bundle=ca_bundle, url=f"https://127.0.0.1:{self.port}/validate",
            name=self.webhook_name, node_selector=self.scope, include_pools=False, controllers=self.controllers))

    def webhook_stop(self, *, remove_config: bool) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None
        if remove_config:
            with contextlib.suppress(NotFound):
                self.kube.delete(f"{ADMISSION}/validatingwebhookconfigurations/{self.webhook_name}")

    def wait_enforced(self, mark: str, timeout: float = 30) -> None:
        """Until an invalid approval on a probe node is denied by the expected layer (policy
        and webhook configurations reach the API server's informers after a short delay)."""
        probe = self.probe
        deadline = time.monotonic() + timeout
        approved = self.names.maintenance_approved
        while time.monotonic() < deadline:
            r = kubectl(self.user, "label", "node", probe, f"{approved}=probe", "--overwrite")
            if r.returncode != 0 and mark in r.stderr:
                return
            if r.returncode == 0:
                kubectl(self.user, "label", "node", probe, f"{approved}-")
            time.sleep(0.3)
        raise TimeoutError(f"{mark} not enforced after {timeout}s: {r.stderr}")

    def cleanup(self) -> None:
        self.webhook_stop(remove_config=True)
        self.floor_off()
        role = f"adm-test-node-writer-{self.suffix}"
        for path in (f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}",
                     f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}",
                     f"/api/v1/namespaces/{self.namespace}", *(f"/api/v1/nodes/{n}" for n in self.nodes)):
            with contextlib.suppress(NotFound):
                self.kube.delete(path)


LAYERS = ("webhook", "floor")


def admission_env(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admission]:
    """The ``admission`` fixture: each module that uses it makes its own from this function."""
    adm = Admission(cluster, tmp_path_factory.mktemp("admission"))
    try:
        adm.setup_identities()
        adm.probe = adm.new_node()
        yield adm
    finally:
        adm.cleanup()


def switch_layer(request: pytest.FixtureRequest, admission: Admission, cluster: Any) -> str:
    """The ``layer`` fixture (params ``LAYERS``). ``webhook``: the webhook alone. ``floor``:
    webhook stopped and removed, CEL floor bound."""
    if request.param == "webhook":
        if not cluster.local or not cluster.opa_url:
            pytest.skip("the webhook runs on this host: needs the local cluster and its OPA server")
        admission.floor_off()
        admission.webhook_start()
        admission.wait_enforced(WEBHOOK_MARK)
    else:
        admission.webhook_stop(remove_config=True)
        admission.floor_on()
        admission.wait_enforced(FLOOR_MARK)
    admission.mode = request.param
    return str(request.param)


LAYERS = ("webhook", "floor")
admission = pytest.fixture(scope="module", name="admission")(admission_env)
layer = pytest.fixture(scope="module", params=LAYERS, name="layer")(switch_layer)


def _mark(layer: str) -> str:
    return WEBHOOK_MARK if layer == "webhook" else FLOOR_MARK


def _labels(adm: Admission, node: str) -> dict[str, str]:
    return adm.kube.get_node(node)["metadata"].get("labels") or {}


def test_user_cannot_add_maintenance_required(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    r = kubectl(admission.user, "label", "node", node, f"{admission.names.maintenance_required}=true")
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "[maintenance-required-controller-only]" in r.stderr
    assert admission.names.maintenance_required not in _labels(admission, node)


def test_controller_sets_and_removes_maintenance_required(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    req = admission.names.maintenance_required
    r = kubectl(admission.controller, "label", "node", node, f"{req}=true")
    assert r.returncode == 0, r.stderr
    assert _labels(admission, node)[req] == "true"
    r = kubectl(admission.controller, "label", "node", node, f"{req}-")
    assert r.returncode == 0, r.stderr
    assert req not in _labels(admission, node)


def test_approval_without_required_says_no_repair_needed(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    r = kubectl(admission.user, "label", "node", node, f"{admission.names.maintenance_approved}=true")
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "no longer needs a repair" in r.stderr


@pytest.mark.parametrize("value", ["false", "yes", "True"])
def test_approval_values_other_than_true_rejected(admission: Admission, layer: str, value: str) -> None:
    node = admission.new_node()
    assert kubectl(admission.controller, "label", "node", node,
                   f"{admission.names.maintenance_required}=true").returncode == 0
    r = kubectl(admission.user, "label", "node", node, f"{admission.names.maintenance_approved}={value}")
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "[maintenance-approved-value]" in r.stderr


def test_approval_while_required_accepted_and_withdrawal_allowed(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    req, appr = admission.names.maintenance_required, admission.names.maintenance_approved
    assert kubectl(admission.controller, "label", "node", node, f"{req}=true").returncode == 0
    r = kubectl(admission.user, "label", "node", node, f"{appr}=true")
    assert r.returncode == 0, r.stderr
    assert _labels(admission, node)[appr] == "true"
    r = kubectl(admission.user, "label", "node", node, f"{appr}-")
    assert r.returncode == 0, r.stderr
    assert appr not in _labels(admission, node)


def test_user_cannot_remove_maintenance_required(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    req = admission.names.maintenance_required
    assert kubectl(admission.controller, "label", "node", node, f"{req}=true").returncode == 0
    r = kubectl(admission.user, "label", "node", node, f"{req}-")
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "[maintenance-required-controller-only]" in r.stderr
    assert _labels(admission, node)[req] == "true"


def test_node_created_with_required_by_non_controller_rejected(admission: Admission, layer: str) -> None:
    name = f"adm-{admission.suffix}-reg-{layer}"
    manifest = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        SCOPE_LABEL: admission.suffix, admission.names.maintenance_required: "true"}}}
    r = kubectl(admission.user, "create", "-f", "-", stdin=json.dumps(manifest))
    if r.returncode == 0:
        admission.nodes.append(name)
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "[maintenance-required-controller-only]" in r.stderr


def test_kubelet_cannot_register_its_node_with_required(admission: Admission, layer: str) -> None:
    """A real kubelet identity (system:node:<name>): NodeRestriction lets it create its own
    Node, and only our layers stop it from arriving already marked for repair."""
    name = f"adm-{admission.suffix}-kubelet-{layer}"
    kubelet = admission.kubelet_kubeconfig(name)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {SCOPE_LABEL: admission.suffix}}}
    marked = json.loads(json.dumps(node))
    marked["metadata"]["labels"][admission.names.maintenance_required] = "true"
    r = kubectl(kubelet, "create", "-f", "-", stdin=json.dumps(marked))
    if r.returncode == 0:
        admission.nodes.append(name)
    assert r.returncode != 0
    assert _mark(layer) in r.stderr and "[maintenance-required-controller-only]" in r.stderr
    assert f"system:node:{name}" in r.stderr
    r = kubectl(kubelet, "create", "-f", "-", stdin=json.dumps(node))
    assert r.returncode == 0, r.stderr
    admission.nodes.append(name)


def test_unrelated_label_changes_pass(admission: Admission, layer: str) -> None:
    node = admission.new_node()
    r = kubectl(admission.user, "label", "node", node, "team=research")
    assert r.returncode == 0, r.stderr



LABEL_STATES = (None, "true", "no")  # absent, the one valid value, any other value


def test_every_user_label_transition_matches_the_rego(admission: Admission, layer: str) -> None:
    """Differential check: all 81 transitions of the two labels (absent / "true" / other) made
    by a user, judged by the API server (this layer) and by the Rego; they must agree, so the
    CEL floor can never allow what the policy denies, nor the webhook's matchConditions skip it."""
    from autoclusters.kube import KubeError, load_kube
    from autoclusters.rego import opa

    req, appr = admission.names.maintenance_required, admission.names.maintenance_approved
    user_kube = load_kube(admission.user)
    controller_kube = load_kube(admission.controller)
    username = f"system:serviceaccount:{admission.namespace}:alice"
    node = admission.new_node()
    states = [{req: r, appr: a} for r in LABEL_STATES for a in LABEL_STATES]
    cases: list[dict[str, Any]] = []
    got: list[bool] = []
    for old in states:
        for new in states:
            controller_kube.patch_node(node, {"metadata": {"labels": old}})  # exempt: sets up any state
            try:
                user_kube.patch_node(node, {"metadata": {"labels": new}})
                allowed = True
            except KubeError as e:
                assert _mark(layer) in str(e), f"denied by something else: {e}"
                allowed = False
            got.append(allowed)
            cases.append({"request": {
                "uid": f"{len(cases)}", "kind": {"group": "", "version": "v1", "kind": "Node"}, "operation": "UPDATE",
                "userInfo": {"username": username},
                "oldObject": {"metadata": {"labels": {k: v for k, v in old.items() if v is not None}}},
                "object": {"metadata": {"labels": {k: v for k, v in new.items() if v is not None}}}}})
    expected = opa.evaluate("[d.allowed | some r in input.reviews; d := data.autoclusters.admission.decision "
                            "with input as r]", {"reviews": cases}, {})
    differ = [(c["request"]["oldObject"], c["request"]["object"], g) for c, g, e in zip(cases, got, expected,
                                                                                      strict=True) if g != e]
    assert not differ, f"{layer} disagrees with the Rego on {len(differ)} transitions: {differ[:5]}"
    # The contract's shape, not only agreement: only the 27 transitions that keep maintenance-required can pass;
    # of those, removing or keeping the approval always does (5 per required state: 15), and setting it to "true"
    # does only while required is present (2 more for each of the two present states: 4).
    assert got.count(True) == 19 and got.count(False) == 62


MANIFEST_STATES = (None, "true", "false", "")  # absent, the one valid value, another value, empty


def test_policy_check_agrees_with_the_cluster_on_every_node_manifest(admission: Admission, layer: str,
                                                                     tmp_path: Path) -> None:
    """GitOps parity: for every combination of the two labels' presence and values in a Node
    manifest, ``autoclusters policy check`` rejects the manifest exactly when this admission
    layer rejects a user's ``kubectl create`` of it."""
    from autoclusters.cli.main import main

    req, appr = admission.names.maintenance_required, admission.names.maintenance_approved
    manifests: list[dict[str, Any]] = []
    for required in MANIFEST_STATES:
        for approved in MANIFEST_STATES:
            labels = {SCOPE_LABEL: admission.suffix,
                      **{k: v for k, v in ((req, required), (appr, approved)) if v is not None}}
            name = f"adm-{admission.suffix}-gitops-{layer}-{len(manifests)}"
            manifests.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
    created = []
    for m in manifests:
        r = kubectl(admission.user, "create", "-f", "-", stdin=json.dumps(m))
        if r.returncode == 0:
            admission.nodes.append(m["metadata"]["name"])
        else:
            assert _mark(layer) in r.stderr, f"denied by something else: {r.stderr}"
        created.append(r.returncode == 0)
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    out = tmp_path / "check.json"
    with out.open("w") as f, contextlib.redirect_stdout(f):
        rc = main(["policy", "check", "-o", "json", "--domain", admission.names.domain, str(path)])
    rejected = {v["index"] for v in json.loads(out.read_text())["violations"]}
    accepted = [i not in rejected for i in range(len(manifests))]
    differ = [(m["metadata"]["labels"], c, p) for m, c, p in zip(manifests, created, accepted, strict=True) if c != p]
    assert not differ, f"policy check and the {layer} disagree (labels, cluster, policy check): {differ}"
    # Not only agreement: only the manifest without either label may be created.
    assert created.count(True) == 1 and created[0] and rc == 1
