"""Certificates and keys for the local control plane (a throwaway CA on loopback), and the
kubeconfigs that hold its client certificates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from cryptography import x509
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

    def issue(self, file_name: str, user: str, group: str | None = None, *, usage: x509.ObjectIdentifier = CLIENT_AUTH,
              hosts: tuple[str, ...] = ()) -> tuple[Path, Path]:
        """One more certificate from the CA :meth:`create` made (a real node's kubelet, its
        serving certificate, its kube-proxy): written as :meth:`client_cert` names it."""
        ca = KeyPair(self.ca_cert.read_bytes(), self.ca_key.read_bytes())
        paths = self.client_cert(file_name)
        _write(*paths, make_leaf(ca, name(user, group), datetime.now(UTC), VALIDITY, hosts=hosts, usage=usage))
        return paths

    def kubeconfig(self, path: Path, server: str, file_name: str, cluster: str) -> None:
        """A kubeconfig at ``path`` for ``server`` with the client certificate ``file_name``."""
        crt, key = self.client_cert(file_name)
        write_kubeconfig(path, server, self.ca_cert, {"client-certificate": str(crt), "client-key": str(key)},
                         cluster)


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str], name: str) -> None:
    cfg = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    path.chmod(0o600)
