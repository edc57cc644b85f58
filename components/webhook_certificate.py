"""``WebhookCertificate``: a CA and the webhook's serving certificate, kept in the stack state.

There is no TLS provider plugin on an offline machine, so a dynamic resource makes the key
pair once, at create; later ``pulumi up`` runs read it back from the state, so the Secret and
the caBundle stay the same and ``pulumi preview`` shows no change. Changing the DNS names or
IP addresses makes a new certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from typing import Any

import pulumi
import pulumi.dynamic as dyn

VALID_DAYS = 825


def issue(dns_names: list[str], ip_addresses: list[str], days: int = VALID_DAYS) -> dict[str, str]:
    """A fresh CA and a serving certificate for ``dns_names`` + ``ip_addresses``, PEM encoded."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autoclusters-webhook-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return {
        "ca_pem": ca.public_bytes(pem).decode(),
        "cert_pem": cert.public_bytes(pem).decode(),
        "key_pem": key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()).decode(),
    }


class _CertificateProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs = {**props, **issue(list(props["dns_names"]), list(props["ip_addresses"]))}
        return dyn.CreateResult(id_=outs["cert_pem"][-80:-26].replace("\n", ""), outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        replaces = [k for k in ("dns_names", "ip_addresses") if list(olds.get(k) or []) != list(news.get(k) or [])]
        return dyn.DiffResult(changes=bool(replaces), replaces=replaces)


class WebhookCertificate(dyn.Resource):
    ca_pem: pulumi.Output[str]
    cert_pem: pulumi.Output[str]
    key_pem: pulumi.Output[str]

    def __init__(self, resource_name: str, *, dns_names: list[str], ip_addresses: list[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        if not dns_names:
            raise ValueError("WebhookCertificate needs at least one DNS name")
        props = {"dns_names": dns_names, "ip_addresses": ip_addresses, "ca_pem": None, "cert_pem": None,
                 "key_pem": None}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=["key_pem"]))
        super().__init__(_CertificateProvider(), resource_name, props, opts)
