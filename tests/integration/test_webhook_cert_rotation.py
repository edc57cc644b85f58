"""The webhook's serving certificate renews itself with no downtime: the controller's keeper
(controller/webhook_certs.py, under the RBAC the stack gives it for that) renews a certificate
of seconds and, once, its CA, against the real API server; the webhook (the real process,
``--tls-cert/--tls-key`` as deployed) reloads the Secret from a volume laid out as the kubelet
lays it out; and through every rotation a person's approvals are admitted through the webhook
while an invalid one is refused by it."""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from autoclusters.certificates import issued_by
from autoclusters.clock import SystemClock
from autoclusters.controller.webhook_certs import TLS_BUNDLE, WebhookCertKeeper, _decode
from autoclusters.deploy.controller import webhook_certificate_rules
from autoclusters.kube import NotFound, load_kube
from autoclusters.webhook.certs import CertPolicy
from tests.integration.test_admission import WEBHOOK_MARK, Admission, admission_env, kubectl
from tests.secret_volume import write_secret_volume

# Seconds, not days: the serving certificate is renewed every 6 s (a third of 9 s left), the CA
# once in the test's 40 s (with 10 s of its 30 left).
POLICY = CertPolicy(ca_lifetime=dt.timedelta(seconds=30), serving_lifetime=dt.timedelta(seconds=9),
                    renew_fraction=1 / 3)
RUN_SECONDS = 40
TLS_SECRET, CA_SECRET = "autoclusters-webhook-tls", "autoclusters-webhook-ca"


@pytest.fixture(scope="module")
def admission(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admission]:
    if not cluster.local or not cluster.opa_url:
        pytest.skip("the webhook runs on this host: needs the local cluster and its OPA server")
    for adm in admission_env(cluster, tmp_path_factory):
        try:
            yield adm
        finally:  # the namespace (the Secrets, the Role) goes with the environment's cleanup
            name = f"adm-test-keeper-{adm.suffix}"
            for path in (f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
                         f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"):
                with contextlib.suppress(NotFound):
                    adm.kube.delete(path)


def _keeper_identity(admission: Admission) -> str:
    """A service account holding only what the controller's roles grant for the certificate."""
    cluster_rule, namespaced = webhook_certificate_rules(admission.webhook_name)
    name, ns = f"adm-test-keeper-{admission.suffix}", admission.namespace
    subject = [{"kind": "ServiceAccount", "name": "keeper", "namespace": ns}]
    rbac = "rbac.authorization.k8s.io/v1"
    admission.cluster.apply([
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": [cluster_rule]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": namespaced},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}},
    ])
    return admission.cluster.service_account_kubeconfig(ns, "keeper")


def _served(port: int, bundle: bytes) -> x509.Certificate:
    """The certificate served now, by a fresh handshake that verifies it against ``bundle`` as
    the API server does on a new connection (the API server keeps its connections to a
    webhook open, so its own requests alone would not show a bundle that stopped trusting)."""
    ctx = ssl.create_default_context(cadata=bundle.decode())
    with socket.create_connection(("127.0.0.1", port), 2) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _bundle(admission: Admission) -> bytes:
    """The caBundle the API server holds for the webhook now."""
    import base64

    cfg = admission.kube.get(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                             f"{admission.webhook_name}")
    return base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])


class Loop(threading.Thread):
    """``step`` every ``seconds`` until stopped; the first error is kept for the test to raise."""

    def __init__(self, step: Any, seconds: float) -> None:
        super().__init__(daemon=True)
        self.step, self.seconds = step, seconds
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except BaseException as e:  # noqa: BLE001 - raised again by end(), in the test's thread
                self.error = e
                return
            self.stop.wait(self.seconds)

    def end(self) -> None:
        self.stop.set()
        self.join(10)
        if self.error is not None:
            raise self.error


def test_approvals_keep_being_admitted_through_serving_certificate_and_ca_rotations(admission: Admission) -> None:
    kube = load_kube(_keeper_identity(admission))
    keeper = WebhookCertKeeper(kube, SystemClock(), namespace=admission.namespace, tls_secret=TLS_SECRET,
                               ca_secret=CA_SECRET, config_name=admission.webhook_name, hosts=["127.0.0.1"],
                               policy=POLICY)
    first = keeper.sync()  # no configuration yet: the Secrets only
    volume = admission.workdir / "tls-volume"
    secret_path = f"/api/v1/namespaces/{admission.namespace}/secrets/{TLS_SECRET}"
    mounted: list[dict[str, bytes]] = []

    def kubelet() -> None:  # the kubelet's sync of a Secret volume
        data = _decode(admission.kube.get(secret_path))
        assert data is not None
        if not mounted or mounted[-1] != data:
            write_secret_volume(volume, data)
            mounted.append(data)

    kubelet()

    def start_webhook(bundle: bytes) -> None:
        log = open(admission.workdir / "webhook-rotation.log", "ab")  # noqa: SIM115 - handed to the child
        admission.proc = subprocess.Popen(
            [sys.executable, "-m", "autoclusters.cli.main", "webhook", "run", "--listen", "127.0.0.1",
             "--port", str(admission.port), "--opa-url", admission.cluster.opa_url, "--webhook-config", "",
             "--tls-cert", str(volume / "tls.crt"), "--tls-key", str(volume / "tls.key"),
             "--cert-check-interval", "0.5"], stdout=log, stderr=subprocess.STDOUT)
        ctx = ssl.create_default_context(cadata=bundle.decode())
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{admission.port}/readyz", timeout=1, context=ctx):
                    return
            except OSError:
                assert admission.proc.poll() is None, (admission.workdir / "webhook-rotation.log").read_text()
                assert time.monotonic() < deadline, "the webhook is not ready"
                time.sleep(0.2)

    start_webhook(first.bundle)
    admission.apply_webhook_config(first.bundle)
    admission.wait_enforced(WEBHOOK_MARK)

    node = admission.new_node()
    req, appr = admission.names.maintenance_required, admission.names.maintenance_approved
    assert kubectl(admission.controller, "label", "node", node, f"{req}=true").returncode == 0
    loops = [Loop(keeper.sync, 1.0), Loop(kubelet, 0.5)]
    for loop in loops:
        loop.start()
    served: list[x509.Certificate] = []
    approvals = 0
    try:
        end = time.monotonic() + RUN_SECONDS
        while time.monotonic() < end:
            r = kubectl(admission.user, "label", "node", node, f"{appr}=true")
            assert r.returncode == 0, f"approval {approvals + 1} refused: {r.stderr}"
            r = kubectl(admission.user, "label", "node", node, f"{appr}-")
            assert r.returncode == 0, f"withdrawal {approvals + 1} refused: {r.stderr}"
            # the webhook is still the one judging: an approval other than "true" is its refusal
            r = kubectl(admission.user, "label", "node", node, f"{appr}=yes")
            assert r.returncode != 0 and WEBHOOK_MARK in r.stderr, r.stderr
            approvals += 1
            cert = _served(admission.port, _bundle(admission))
            if not served or served[-1] != cert:
                served.append(cert)
    finally:
        for loop in loops:
            loop.end()
    assert approvals >= 10
    assert len(served) >= 4, f"only {len(served)} serving certificates were served in {RUN_SECONDS}s"
    # the CA itself was renewed once at least: the served certificates come from two CAs
    assert len({_signer(c, mounted) for c in served}) >= 2
    # a webhook started again (a new pod): the API server's new connection trusts what it serves
    admission.webhook_stop(remove_config=False)
    start_webhook(_bundle(admission))
    r = kubectl(admission.user, "label", "node", node, f"{appr}=true")
    assert r.returncode == 0, f"the approval after the restart was refused: {r.stderr}"


def _signer(cert: x509.Certificate, mounted: list[dict[str, bytes]]) -> bytes:
    """The public key of the CA (from any bundle the volume held) that signed ``cert``."""
    from cryptography.hazmat.primitives import serialization

    for data in mounted:
        for ca in x509.load_pem_x509_certificates(data[TLS_BUNDLE]):
            if issued_by(cert, ca):
                return ca.public_key().public_bytes(serialization.Encoding.PEM,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo)
    raise AssertionError(f"no CA of the bundles signed {cert.serial_number}")

