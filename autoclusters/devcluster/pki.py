"""Certificates and keys for the local control plane (a throwaway CA on loopback)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = timedelta(days=365)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


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
        now = datetime.now(UTC) - timedelta(minutes=5)
        ca_key = _key()
        ca_name = _name("autoclusters-dev-ca")
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + VALIDITY)
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(
                  digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                  key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                  decipher_only=False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        _write_key(self.ca_key, ca_key)
        _write_cert(self.ca_cert, ca)

        def leaf(subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName] | None = None
                 ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
            key = _key()
            b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
                 .public_key(key.public_key()).serial_number(x509.random_serial_number())
                 .not_valid_before(now).not_valid_after(now + VALIDITY)
                 .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
            if sans:
                b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            return b.sign(ca_key, hashes.SHA256()), key

        sans: list[x509.GeneralName] = [
            x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"), x509.DNSName("kubernetes.default.svc.cluster.local"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        ]
        cert, key = leaf(_name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
        _write_cert(self.serving_cert, cert)
        _write_key(self.serving_key, key)
        sa = _key()
        _write_key(self.sa_key, sa)
        self.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
        for file_name, (user, group) in clients.items():
            cert, key = leaf(_name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH)
            crt_path, key_path = self.client_cert(file_name)
            _write_cert(crt_path, cert)
            _write_key(key_path, key)
