"""The webhook's serving certificate, renewed by the controller's leader (docs/admission.md,
"Certificates").

The controller keeps a CA of its own in a Secret only it can read (``ca.crt``, ``ca.key`` and
``retired.crt``: CAs it no longer signs with but the API server must still trust), issues the
webhook's serving certificate into the webhook's TLS Secret (``tls.crt``, ``tls.key``, and
``ca.crt``: the bundle), and keeps the bundle in every webhook of the webhook configuration.
The webhook has no API rights: it reloads the mounted Secret when its files change.

No downtime: a certificate is renewed once less than ``renew_fraction`` of its life is left,
so the one served stays valid while the kubelet brings the new Secret to the webhook's pods.
A new CA goes into the bundle before anything it signed is served (the writes go CA Secret,
then the bundle, then the TLS Secret), and a retired CA stays in the bundle until it expires,
so the API server trusts whichever certificate a pod serves. A serving certificate issued by
someone else (the Pulumi stack's first one) is trusted the same way until it expires.

``plan`` is the pure part (the Secrets' data in, their data and the bundle out);
``WebhookCertKeeper`` reads and writes them.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from autoclusters.certificates import KeyPair, covers, issued_by, make_ca, make_serving
from autoclusters.clock import Clock
from autoclusters.kube import Kube, NotFound
from autoclusters.webhook.certs import CA_NAME, CertPolicy
from autoclusters.webhook.install import write_ca_bundle

log = logging.getLogger(__name__)

Data = dict[str, bytes]
# The keys of the two Secrets. The TLS Secret is ``kubernetes.io/tls``; ``ca.crt`` beside the
# pair is the bundle (the PodMonitor verifies the webhook's metrics endpoint with it).
CA_CERT, CA_KEY, RETIRED = "ca.crt", "ca.key", "retired.crt"
TLS_CERT, TLS_KEY, TLS_BUNDLE = "tls.crt", "tls.key", "ca.crt"


@dataclass(frozen=True)
class Plan:
    ca: Data  # the CA Secret's data
    tls: Data  # the TLS Secret's data
    bundle: bytes  # what every webhook's caBundle holds

    @property
    def serving(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.tls[TLS_CERT])


def _certs(pem: bytes | None) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem) if pem else []
    except ValueError:
        return []


def _pem(certs: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(Encoding.PEM) for c in certs)


def _pair(cert: bytes | None, key: bytes | None) -> KeyPair | None:
    if not cert or not key:
        return None
    pair = KeyPair(cert, key)
    try:
        pair.private_key()
        _ = pair.cert  # both parse, or a damaged Secret is replaced
    except (ValueError, TypeError):
        return None
    return pair


def plan(ca_data: Data | None, tls_data: Data | None, hosts: Sequence[str], now: dt.datetime,
         policy: CertPolicy) -> Plan:
    """What the two Secrets and the bundle must hold at ``now``; equal data when nothing is due."""
    ca_data, tls_data = ca_data or {}, tls_data or {}
    ca = _pair(ca_data.get(CA_CERT), ca_data.get(CA_KEY))
    retired = [c for c in _certs(ca_data.get(RETIRED)) if c.not_valid_after_utc > now]
    serving = _pair(tls_data.get(TLS_CERT), tls_data.get(TLS_KEY))
    if serving is not None and serving.cert.not_valid_after_utc > now and (
            ca is None or not issued_by(serving.cert, ca.cert)):
        # Served now but signed by a CA we do not hold (the stack's first certificate): its
        # issuer stays trusted until it expires, so the swap below never breaks a handshake.
        for issuer in _certs(tls_data.get(TLS_BUNDLE)):
            if (issued_by(serving.cert, issuer) and issuer.not_valid_after_utc > now
                    and issuer not in retired and (ca is None or issuer != ca.cert)):
                retired.append(issuer)
    if ca is None or ca.due(now, policy.renew_fraction):
        if ca is not None:
            retired.append(ca.cert)
        ca = make_ca(CA_NAME, now, policy.ca_lifetime)
        log.info("generated a new webhook CA, valid until %s", ca.cert.not_valid_after_utc)
    if (serving is None or serving.due(now, policy.renew_fraction) or not issued_by(serving.cert, ca.cert)
            or not covers(serving.cert, hosts)):
        serving = make_serving(ca, list(hosts), now, policy.serving_lifetime)
        log.info("issued a new webhook serving certificate for %s, valid until %s", ",".join(hosts),
                 serving.cert.not_valid_after_utc)
    bundle = ca.cert_pem + _pem(retired)
    return Plan(ca={CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem, RETIRED: _pem(retired)},
                tls={TLS_CERT: serving.cert_pem, TLS_KEY: serving.key_pem, TLS_BUNDLE: bundle},
                bundle=bundle)


def _valid(tls: Data | None, now: dt.datetime) -> bool:
    """``tls`` holds a certificate and its key, not expired."""
    pair = _pair((tls or {}).get(TLS_CERT), (tls or {}).get(TLS_KEY))
    return pair is not None and pair.cert.not_valid_after_utc > now


def _decode(secret: dict | None) -> Data | None:
    if secret is None:
        return None
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _encode(data: Data) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


class WebhookCertKeeper:
    """Reads the two Secrets, and writes what ``plan`` changed: the CA Secret, then the bundle
    into ``config_name``, then the TLS Secret. ``sync`` is idempotent and cheap (two GETs and
    one of the configuration) when nothing is due."""

    def __init__(self, kube: Kube, clock: Clock, *, namespace: str, tls_secret: str, ca_secret: str,
                 config_name: str, hosts: Sequence[str], policy: CertPolicy) -> None:
        if not hosts:
            raise ValueError("the webhook's serving certificate needs at least one host name")
        self.kube, self.clock = kube, clock
        self.namespace, self.tls_secret, self.ca_secret = namespace, tls_secret, ca_secret
        self.config_name, self.hosts, self.policy = config_name, list(hosts), policy

    def _path(self, name: str | None = None) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets" + (f"/{name}" if name else "")

    def _read(self, name: str) -> dict | None:
        try:
            return self.kube.get(self._path(name))
        except NotFound:
            return None

    def _write(self, name: str, current: dict | None, data: Data, secret_type: str) -> None:
        if current is None:
            self.kube.create(self._path(), {"apiVersion": "v1", "kind": "Secret", "type": secret_type,
                                            "metadata": {"name": name, "namespace": self.namespace,
                                                         "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
                                            "data": _encode(data)})
        elif _decode(current) != data:
            # The resourceVersion read makes the write conditional: a concurrent writer's change
            # fails it (409) and the next sync starts from what is there.
            self.kube.patch(self._path(name), {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                                               "data": _encode(data)})

    def sync(self) -> Plan:
        """One pass; returns the plan. While the webhook configuration does not exist (the
        stack creates it last), a serving certificate that is still valid is left as it is:
        the configuration will be created with the bundle that trusts it, and the swap comes at
        the first pass that has written the new bundle."""
        now = self.clock.now()
        ca_secret, tls_secret = self._read(self.ca_secret), self._read(self.tls_secret)
        current = _decode(tls_secret)
        out = plan(_decode(ca_secret), current, self.hosts, now, self.policy)
        self._write(self.ca_secret, ca_secret, out.ca, "Opaque")
        if write_ca_bundle(self.kube, self.config_name, out.bundle) or not _valid(current, now):
            self._write(self.tls_secret, tls_secret, out.tls, "kubernetes.io/tls")
        return out
