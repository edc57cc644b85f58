"""The registered providers: one line per provider, its module's ``KIND``.

A provider module (``providers/<type>.py``) declares itself in one ``ProviderKind``: its
settings, RBAC rules, credentials, node guards, actions and builder. The CRD schema, the strict
parser and the Rego data (``deploy/providers.py``), the controller's roles
(``deploy/controller.py``) and the node guards the actuator writes derive from ``KINDS``. The
settings arrive at a builder already checked (types, ranges, required fields) and with their
defaults filled in; a builder may still refuse what only the controller can judge (a command
that does not exist in its container) with a ``ProviderError`` naming the field.
"""

from __future__ import annotations

from dataclasses import replace

from autoclusters.allow_lists import AllowList
from autoclusters.kube.request_counter import provider_component
from autoclusters.providers import clusterapi, command, ec2, hostreboot, karpenter, redfish, simulated
from autoclusters.providers.actions import ACTIONS
from autoclusters.providers.base import BuildContext, Provider, ProviderError
from autoclusters.providers.declaration import NodeGuard, ProviderKind
from autoclusters.providers.types import ProviderSpec

KINDS: dict[str, ProviderKind] = {}


def register(kind: ProviderKind) -> ProviderKind:
    """Adds a provider; its actions must be in the action table (providers/actions.py)."""
    unknown = [a for a in kind.actions if a not in ACTIONS]
    if unknown:
        raise ValueError(f"provider {kind.type!r} names actions that are not registered: {', '.join(unknown)}")
    if kind.type in KINDS and KINDS[kind.type] != kind:
        raise ValueError(f"provider {kind.type!r} is registered already")
    if kind.build is None:
        raise ValueError(f"provider {kind.type!r} has no builder")
    KINDS[kind.type] = kind
    return kind


register(simulated.KIND)
register(command.KIND)
register(clusterapi.KIND)
register(hostreboot.KIND)
register(karpenter.KIND)
register(redfish.KIND)
register(ec2.KIND)


def node_guards() -> tuple[NodeGuard, ...]:
    """Every registered provider's node guards (what a marked node gets for their backends)."""
    return tuple(g for k in KINDS.values() for g in k.guards)


def build_provider(spec: ProviderSpec, context: BuildContext) -> Provider:
    """Raises ProviderError (naming the field) when the controller cannot use these settings,
    among them a command or image that is no entry of the operator's allow-list (even when
    admission let the pool through). The provider's API requests are counted as
    ``provider/<type>``, apart from the controller's."""
    kind = KINDS[spec.type]
    for name, listed, value in kind.allow_listed(spec.settings):
        refused = context.allow_lists.refusal(AllowList(listed), value, f"provider.{spec.type}.{name}")
        if refused:
            raise ProviderError(refused)
    own = replace(context, kube=context.kube.for_component(provider_component(spec.type)))
    build = kind.build
    assert build is not None  # register() checks
    return build(spec.settings, own)


__all__ = ["KINDS", "BuildContext", "build_provider", "node_guards", "register"]
