"""Certificates and keys for the local control plane (a throwaway CA on loopback)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from autoclusters.certificates import CLIENT_AUTH, SERVER_AUTH, KeyPair, key_pem, make_ca, make_leaf, name, new_key

VALIDITY = timedelta(days=365)
SERVING_HOSTS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1",
                 "10.250.0.1")  # the host on the real nodes' network (devcluster/realnodes.HOST_IP)


def _write(cert: Path, key: Path, pair: KeyPair) -> None:
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    key.chmod(0o600)


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_cert(self, name: str) -> tuple[Path, Path]:
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"

    def create(self, clients: dict[str, tuple[str, str | None]]) -> None:
        """CA, API server serving cert, service-account keys, and one client cert per entry
        of ``clients`` (file name -> (user name, group))."""
        self.dir.mkdir(parents=True, exist_ok=True)
        now = datetime.now(UTC)
        ca = make_ca("autoclusters-dev-ca", now, VALIDITY)
        _write(self.ca_cert, self.ca_key, ca)
        _write(self.serving_cert, self.serving_key,
               make_leaf(ca, name("kube-apiserver"), now, VALIDITY, hosts=SERVING_HOSTS, usage=SERVER_AUTH))
        sa = new_key()
        self.sa_key.write_bytes(key_pem(sa))
        self.sa_key.chmod(0o600)
        self.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
        for file_name, (user, group) in clients.items():
            _write(*self.client_cert(file_name), make_leaf(ca, name(user, group), now, VALIDITY, usage=CLIENT_AUTH))
