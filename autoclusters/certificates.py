"""The one builder of certificate authorities and the certificates they sign.

Used by the webhook's self-renewing serving certificate (``webhook/certs.py``), the Pulumi
stack's webhook certificate (``components/webhook_certificate.py``) and the local control
plane's CA, serving and client certificates (``devcluster/pki.py``). EC P-256 keys, SHA-256
signatures, a validity that starts five minutes back (clock skew), and a leaf never outlives
its CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SKEW = dt.timedelta(minutes=5)
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("not an EC private key")
        return key

    def due(self, now: dt.datetime, fraction: float) -> bool:
        """Less than ``fraction`` of the certificate's life is left; its life counted from its
        issue, not from the back-dated start (``SKEW``), so that a lifetime of seconds (tests) is
        renewed as one of days is."""
        c = self.cert
        life = max(c.not_valid_after_utc - c.not_valid_before_utc - SKEW, dt.timedelta(0))
        return c.not_valid_after_utc - now <= life * fraction


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def make_ca(common_name: str, now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    """A self-signed CA that signs leaf certificates only (path length 0)."""
    key = new_key()
    subject = name(common_name)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW).not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def make_leaf(ca: KeyPair, subject: x509.Name, now: dt.datetime, lifetime: dt.timedelta, *,
              hosts: Sequence[str] = (), usage: x509.ObjectIdentifier = SERVER_AUTH) -> KeyPair:
    """A certificate signed by ``ca`` for ``usage``; ``hosts`` (DNS names and IP addresses)
    become its subject alternative names."""
    key = new_key()
    ca_cert = ca.cert
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - SKEW).not_valid_after(min(now + lifetime, ca_cert.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    # The leaf names its CA by key, not only by subject (RFC 5280, 4.2.1.1): a bundle holds a CA and
    # the one it replaced under the same name, and a verifier that picks the issuer by name alone
    # (OpenSSL) would try the wrong one.
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        ski = None
    if ski is not None:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                                        critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def make_serving(ca: KeyPair, hosts: Sequence[str], now: dt.datetime, lifetime: dt.timedelta) -> KeyPair:
    """A serving certificate for ``hosts`` (the first one is also its common name)."""
    return make_leaf(ca, name(hosts[0]), now, lifetime, hosts=hosts, usage=SERVER_AUTH)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """``ca`` signed ``cert``."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def covers(cert: x509.Certificate, hosts: Sequence[str]) -> bool:
    """``cert``'s subject alternative names include every one of ``hosts``."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(v) for v in san.get_values_for_type(x509.IPAddress)} | set(san.get_values_for_type(x509.DNSName))
    return set(hosts) <= have
