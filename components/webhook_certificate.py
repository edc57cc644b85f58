"""``WebhookCertificate``: a CA and the webhook's serving certificate, kept in the stack state.

There is no TLS provider plugin on an offline machine, so a dynamic resource makes the key
pair once, at create; later ``pulumi up`` runs read it back from the state, so the Secret and
the caBundle stay the same and ``pulumi preview`` shows no change. Changing the DNS names or
IP addresses makes a new certificate.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from autoclusters import certificates
from autoclusters.webhook.certs import CA_NAME

VALID_DAYS = 825


def issue(dns_names: list[str], ip_addresses: list[str], days: int = VALID_DAYS) -> dict[str, str]:
    """A fresh CA and a serving certificate for ``dns_names`` + ``ip_addresses``, PEM encoded."""
    now = dt.datetime.now(dt.UTC)
    lifetime = dt.timedelta(days=days)
    ca = certificates.make_ca(CA_NAME, now, lifetime)
    serving = certificates.make_serving(ca, [*dns_names, *ip_addresses], now, lifetime)
    return {"ca_pem": ca.cert_pem.decode(), "cert_pem": serving.cert_pem.decode(), "key_pem": serving.key_pem.decode()}


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
