"""Serving certificates that need no manual steps: a self-signed CA and a short-lived
serving certificate, renewed before expiry and swapped into the live SSL context.

The CA lives longer than the serving certificate, so most renewals change nothing the API
server holds. When the CA itself is renewed, the bundle written into the webhook
configuration carries the new and the previous CA until the old one expires, so there is
no window in which the API server distrusts the serving certificate.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from autoclusters.certificates import KeyPair, covers, issued_by, make_ca, make_serving
from autoclusters.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CertPolicy:
    """Lifetimes; a certificate is renewed once less than ``renew_fraction`` of its life is left."""

    ca_lifetime: dt.timedelta = dt.timedelta(days=365)
    serving_lifetime: dt.timedelta = dt.timedelta(days=30)
    renew_fraction: float = 1 / 3


CA_NAME = "autoclusters-webhook-ca"


class CertStore:
    """Certificates in a directory: ``ca.crt``/``ca.key``, ``tls.crt``/``tls.key`` and
    ``ca-previous.crt`` (kept in the bundle during a CA change). Writes are atomic."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def read(self, stem: str) -> KeyPair | None:
        crt, key = self.dir / f"{stem}.crt", self.dir / f"{stem}.key"
        if crt.exists() and key.exists():
            return KeyPair(crt.read_bytes(), key.read_bytes())
        return None

    def write(self, stem: str, pair: KeyPair) -> None:
        self._write(f"{stem}.key", pair.key_pem, 0o600)
        self._write(f"{stem}.crt", pair.cert_pem, 0o644)

    def read_previous_ca(self) -> bytes | None:
        p = self.dir / "ca-previous.crt"
        return p.read_bytes() if p.exists() else None

    def write_previous_ca(self, pem: bytes | None) -> None:
        p = self.dir / "ca-previous.crt"
        if pem is None:
            p.unlink(missing_ok=True)
        else:
            self._write(p.name, pem, 0o644)

    def _write(self, name: str, data: bytes, mode: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{name}.")
        try:
            os.write(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, self.dir / name)


class CertManager:
    """Keeps a valid serving certificate in ``store`` and a server SSL context loaded with it.

    ``ensure()`` is idempotent and cheap when nothing is due; the server calls it at
    start and then periodically off the request path. It returns True when the CA
    bundle changed, so the caller rewrites the webhook configuration's caBundle.
    """

    def __init__(self, store: CertStore, hosts: Sequence[str], clock: Clock, policy: CertPolicy | None = None) -> None:
        self.store = store
        self.hosts = list(hosts)
        self.clock = clock
        self.policy = policy or CertPolicy()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: bytes | None = None
        self.not_after: dt.datetime | None = None  # of the certificate loaded

    def ensure(self) -> bool:
        now, p = self.clock.now(), self.policy
        ca = self.store.read("ca")
        bundle_changed = False
        previous = self.store.read_previous_ca()
        if previous is not None and _expired(previous, now):
            self.store.write_previous_ca(None)
            bundle_changed = True
        if ca is None or ca.due(now, p.renew_fraction):
            if ca is not None:
                self.store.write_previous_ca(ca.cert_pem)
            ca = make_ca(CA_NAME, now, p.ca_lifetime)
            self.store.write("ca", ca)
            bundle_changed = True
            log.info("generated a new webhook CA, valid until %s", ca.cert.not_valid_after_utc)
        serving = self.store.read("tls")
        if (bundle_changed or serving is None or serving.due(now, p.renew_fraction)
                or not _signed_by(serving, ca) or not self._covers(serving)):
            serving = make_serving(ca, self.hosts, now, p.serving_lifetime)
            self.store.write("tls", serving)
            log.info("issued a new serving certificate for %s, valid until %s", ",".join(self.hosts),
                     serving.cert.not_valid_after_utc)
        if serving.cert_pem != self._loaded:
            # New handshakes use the new certificate; open connections keep theirs.
            self.context.load_cert_chain(self.store.dir / "tls.crt", self.store.dir / "tls.key")
            self._loaded = serving.cert_pem
            self.not_after = serving.cert.not_valid_after_utc
        return bundle_changed

    def ca_bundle(self) -> bytes:
        ca = self.store.read("ca")
        if ca is None:
            raise RuntimeError("no CA yet: call ensure() first")
        return ca.cert_pem + (self.store.read_previous_ca() or b"")

    def _covers(self, pair: KeyPair) -> bool:
        return covers(pair.cert, self.hosts)


def _expired(pem: bytes, now: dt.datetime) -> bool:
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc <= now


def _signed_by(pair: KeyPair, ca: KeyPair) -> bool:
    return issued_by(pair.cert, ca.cert)


class FileCertReloader:
    """For certificates someone else issues (the controller or cert-manager writing a mounted
    Secret): reloads the SSL context when the files' contents change.

    The kubelet updates a Secret volume by swapping a symlink (``..data``) to a new directory,
    so the two files change together; a read that straddles a swap sees a certificate and a key
    that do not match, and is read again. A pair is checked before it is loaded, and read again
    after, so the live context never holds a certificate with another's key (``load_cert_chain``
    replaces the certificate before it checks the key)."""

    ATTEMPTS = 5

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: tuple[bytes, bytes] | None = None
        self.not_after: dt.datetime | None = None  # of the certificate loaded

    def ensure(self) -> bool:
        for _ in range(self.ATTEMPTS):
            pair = (self.cert.read_bytes(), self.key.read_bytes())
            if pair == self._loaded:
                return False
            if not _matches(*pair):
                continue
            try:
                self.context.load_cert_chain(self.cert, self.key)
            except ssl.SSLError:
                continue
            if (self.cert.read_bytes(), self.key.read_bytes()) == pair:
                self._loaded = pair
                self.not_after = x509.load_pem_x509_certificate(pair[0]).not_valid_after_utc
                log.info("loaded serving certificate %s, valid until %s", self.cert, self.not_after)
                return False
        raise RuntimeError(f"{self.cert} and {self.key} do not hold a matching certificate and key "
                           f"(read {self.ATTEMPTS} times)")


def _matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """The certificate's public key is the key's."""
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(cert.public_key().public_bytes(serialization.Encoding.PEM, spki)
                == key.public_key().public_bytes(serialization.Encoding.PEM, spki))
