"""``AdmissionPolicy``: the webhook (Deployment with an OPA sidecar, Service, PDB, serving
certificate, policy ConfigMap, ValidatingWebhookConfiguration) and the CEL floor
(ValidatingAdmissionPolicy + binding).

``webhook_url`` points the API server at a webhook running outside the cluster; the local
mode uses it for the webhook process on the host (the certificate then also names
127.0.0.1). Otherwise the API server calls the in-cluster Service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pulumi

from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.deploy import DEFAULT_NAMESPACE, stack, workloads
from autoclusters.deploy.pod_settings import PodSettings
from autoclusters.deploy.policy_bundle import policies_dir as bundled_policies
from autoclusters.names import Names
from components._args import ComponentArgsError, require_image, require_namespace
from components._k8s import k8s_resource
from components.webhook_certificate import WebhookCertificate


@dataclass(frozen=True)
class AdmissionPolicyArgs:
    image: str
    opa_image: str
    names: Names = field(default_factory=Names)
    namespace: str = DEFAULT_NAMESPACE
    webhook_url: str | None = None
    policies_dir: Path = field(default_factory=bundled_policies)
    pods: PodSettings = field(default_factory=PodSettings)  # the stack's pods / imagePullSecrets settings
    allow_lists: AllowLists = NO_ENTRIES  # what the pool rules allow pools to name

    def __post_init__(self) -> None:
        require_namespace(self.namespace, "AdmissionPolicy")
        require_image(self.image, "AdmissionPolicy")
        require_image(self.opa_image, "AdmissionPolicy", "opa_image")
        if self.webhook_url is not None:
            url = urlparse(self.webhook_url)
            if url.scheme != "https" or not url.hostname:
                raise ComponentArgsError(f"AdmissionPolicy: webhook_url {self.webhook_url!r} must be an https:// URL")
        if not Path(self.policies_dir).is_dir():
            raise ComponentArgsError(f"AdmissionPolicy: policies_dir {self.policies_dir} is not a directory")

    @property
    def certificate_names(self) -> tuple[list[str], list[str]]:
        dns, ips = workloads.webhook_certificate_hosts(self.namespace), []
        host = urlparse(self.webhook_url).hostname if self.webhook_url else None
        if host:
            try:
                import ipaddress

                ipaddress.ip_address(host)
                ips.append(host)
            except ValueError:
                dns.append(host)
        return dns, ips


class AdmissionPolicy(pulumi.ComponentResource):
    ca_pem: pulumi.Output[str]
    webhook_configuration_name: pulumi.Output[str]

    def __init__(self, name: str, args: AdmissionPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("autoclusters:index:AdmissionPolicy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names, ns = args.names, args.namespace
        dns, ips = args.certificate_names
        cert = WebhookCertificate("webhook-certificate", dns_names=dns, ip_addresses=ips, opts=child)
        # deploy.stack.webhook_objects lists them (and the renderer writes them); only the
        # certificate's PEMs are filled in here, once the certificate exists.
        secret, policies_cm, deployment_obj, service_obj, pdb, policy_obj, binding, config = stack.webhook_objects(
            names, ns, args.image, args.opa_image, webhook_url=args.webhook_url, policies_dir=Path(args.policies_dir),
            allow_lists=args.allow_lists)
        secret["stringData"] = pulumi.Output.secret(pulumi.Output.all(cert.cert_pem, cert.key_pem, cert.ca_pem).apply(
            lambda p: {"tls.crt": p[0], "tls.key": p[1], "ca.crt": p[2]}))
        tls = k8s_resource(secret, child)
        policies = k8s_resource(policies_cm, child)
        deployment = k8s_resource(args.pods.customize(deployment_obj),
                                  pulumi.ResourceOptions(parent=self, depends_on=[tls, policies]))
        service = k8s_resource(service_obj, child)
        k8s_resource(pdb, child)
        policy = k8s_resource(policy_obj, child)
        k8s_resource(binding, pulumi.ResourceOptions(parent=self, depends_on=[policy]))
        config["webhooks"] = cert.ca_pem.apply(
            lambda ca: stack.webhook_configuration(names, ns, args.webhook_url, ca)["webhooks"])
        # Registered last: the API server calls the webhook only once its backend exists.
        vwc = k8s_resource(config, pulumi.ResourceOptions(parent=self, depends_on=[deployment, service]))
        self.ca_pem = cert.ca_pem
        self.webhook_configuration_name = vwc.metadata.apply(lambda m: m["name"])
        self.register_outputs({"ca_pem": self.ca_pem, "webhook_configuration_name": self.webhook_configuration_name})
