"""Builds the provider a pool names for an action: one builder per ``ProviderType``.

The types and their settings are defined once in ``autoclusters.deploy.providers``; the
settings arrive here already checked (types, ranges, required fields) and with their
defaults filled in. A builder may still refuse what only the controller can judge (a
command that does not exist in its container) with a ``ProviderError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoclusters import api
from autoclusters.clock import Clock
from autoclusters.deploy.allow_lists import NONE as NO_ENTRIES
from autoclusters.deploy.allow_lists import AllowLists, pool_refusals
from autoclusters.deploy.providers import DEFAULT_HOST_REBOOT_ARGV, ProviderChoice, ProviderSpec, ProviderType
from autoclusters.kube import Kube
from autoclusters.kube.request_counter import provider_component
from autoclusters.names import Names
from autoclusters.providers.base import NodeCache, Provider, ProviderError
from autoclusters.providers.clusterapi import ClusterApiProvider
from autoclusters.providers.command import CommandProvider


@dataclass(frozen=True)
class BuildContext:
    """What every builder may use: the API, the clock, the names, the controller's settings."""

    kube: Kube
    clock: Clock
    names: Names
    sim_reset_seconds: float = api.SIM_RESET_SECONDS
    sim_replace_seconds: float = api.SIM_REPLACE_SECONDS
    namespace: str = api.DEFAULT_NAMESPACE  # where provider Jobs run (the controller's namespace)
    image: str = ""  # the controller's own image: the default image of provider Jobs
    image_pull_secrets: tuple[str, ...] = ()  # Secrets of ``namespace`` provider Jobs pull their image with
    nodes: NodeCache | None = None  # the controller's node cache (None: providers read nodes from the API)
    host_reboot_command: tuple[str, ...] = DEFAULT_HOST_REBOOT_ARGV  # the operator's (--host-reboot-command)
    allow_lists: AllowLists = NO_ENTRIES  # the operator's (--allow-lists): a setting held to one must be an entry


Builder = Callable[[Mapping[str, Any], BuildContext], Provider]


def _simulated(s: Mapping[str, Any], c: BuildContext) -> Provider:
    # The simulation's one door from the product: loaded only when a pool names this type.
    from autoclusters.sim.provider import SimulatedProvider

    return SimulatedProvider(c.kube, c.clock, c.names,
                             reset_seconds=float(s.get("resetSeconds", c.sim_reset_seconds)),
                             replace_seconds=float(s.get("replaceSeconds", c.sim_replace_seconds)), nodes=c.nodes)


def _command(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return CommandProvider(list(s["command"]), timeout=float(s["timeoutSeconds"]))


def _clusterapi(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return ClusterApiProvider(c.kube, c.clock, c.names, version=str(s["version"]))


def _host_reboot(s: Mapping[str, Any], c: BuildContext) -> Provider:
    from autoclusters.providers.hostreboot import HostRebootProvider

    return HostRebootProvider(c.kube, c.clock, c.names, namespace=c.namespace,
                              image=str(s.get("image") or c.image), timeout=float(s["timeoutSeconds"]),
                              nodes=c.nodes, host_command=c.host_reboot_command,
                              image_pull_secrets=c.image_pull_secrets)


def _karpenter(s: Mapping[str, Any], c: BuildContext) -> Provider:
    from autoclusters.providers.karpenter import KarpenterProvider

    return KarpenterProvider(c.kube, c.clock, c.names, timeout_seconds=float(s["timeoutSeconds"]), nodes=c.nodes)


def _redfish(s: Mapping[str, Any], c: BuildContext) -> Provider:
    from autoclusters.providers.redfish import RedfishProvider

    return RedfishProvider(c.kube, c.clock, c.names, namespace=c.namespace, timeout=float(s["timeoutSeconds"]),
                           request_timeout=float(s["requestTimeoutSeconds"]),
                           power_on_after=float(s["powerOnAfterSeconds"]),
                           insecure=bool(s["insecureSkipTLSVerify"]), nodes=c.nodes)


def _ec2(s: Mapping[str, Any], c: BuildContext) -> Provider:
    from autoclusters.providers.ec2 import Ec2Provider

    return Ec2Provider(c.kube, c.clock, c.names, namespace=c.namespace, mode=str(s["mode"]),
                       region=str(s.get("region", "")), credentials=str(s["credentials"]),
                       timeout=float(s["timeoutSeconds"]), request_timeout=float(s["requestTimeoutSeconds"]),
                       nodes=c.nodes)


BUILDERS: dict[str, Builder] = {  # one line per provider: its type (deploy/providers.py, KINDS) and builder
    ProviderType.SIMULATED: _simulated,
    ProviderType.COMMAND: _command,
    ProviderType.CLUSTERAPI: _clusterapi,
    ProviderType.HOST_REBOOT: _host_reboot,
    ProviderType.KARPENTER: _karpenter,
    ProviderType.REDFISH: _redfish,
    ProviderType.EC2: _ec2,
}


def build_provider(spec: ProviderSpec, context: BuildContext) -> Provider:
    """Raises ProviderError (naming the field) when the controller cannot use these settings,
    among them a command or image that is no entry of the operator's allow-list (even when
    admission let the pool through). The provider's API requests are counted as
    ``provider/<type>``, apart from the controller's."""
    refused = pool_refusals(context.allow_lists, provider=ProviderChoice(spec))
    if refused:
        raise ProviderError(refused[0].replace("spec.provider.", "provider.", 1))
    own = replace(context, kube=context.kube.for_component(provider_component(spec.type)))
    return BUILDERS[spec.type](spec.settings, own)
