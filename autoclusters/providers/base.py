"""The provider interface the controller drives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from autoclusters import api
from autoclusters.allow_lists import NONE as NO_ENTRIES
from autoclusters.allow_lists import AllowLists
from autoclusters.clock import Clock
from autoclusters.kube import Kube, NotFound
from autoclusters.names import Names
from autoclusters.providers.types import Operation, ProviderView

# Reads a node from the controller's cache: the object, or None when it does not exist.
NodeLookup = Callable[[str], dict[str, Any] | None]


@dataclass(frozen=True)
class NodeCache:
    """The controller's informer cache of nodes, for a provider that reads and writes nodes:
    ``get`` answers without a request; ``written`` / ``deleted`` put the provider's own writes
    into the cache at once, so its next look never sees an older copy than it wrote; ``items``
    (when the cache can list) is every node it holds, for a provider that looks for new nodes."""

    get: NodeLookup
    written: Callable[[dict[str, Any]], None]
    deleted: Callable[[str], None]
    items: Callable[[], list[dict[str, Any]]] | None = None


def read_node(name: str, nodes: NodeCache | None, kube: Kube) -> dict[str, Any] | None:
    """A node from the controller's cache when the provider has one, else from the API;
    None when it is gone."""
    if nodes is not None:
        return nodes.get(name)
    try:
        return kube.get_node(name)
    except NotFound:
        return None


class ProviderError(Exception):
    """A provider that is misconfigured (bad settings in GpuNodePool.spec.provider); the message names the field."""


class Provider(Protocol):
    name: str

    def drive(self, op: Operation, node: str, pool: str) -> None:
        """Start or continue the operation; a no-op when it already finished. Idempotent per ``op.id``."""

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        """Where the operation stands, from what the backend recorded."""

    def replacement_name(self, op: Operation, pool: str) -> str:
        """The new node's name for a replacement, when the provider chooses it ("" when unknown)."""

    def refusal(self, node: dict[str, Any] | None) -> str:
        """Why this provider will not act on ``node`` ("" = it will); asked before a repair starts,
        so a node it cannot repair is never cordoned and drained for nothing. Read from the node's
        labels, annotations and spec: the pool's condition asks again only when those (or the
        node's conditions) change, not on a heartbeat."""


@dataclass(frozen=True)
class BuildContext:
    """What every builder (``ProviderKind.build``) may use: the API, the clock, the names, the controller's settings."""

    kube: Kube
    clock: Clock
    names: Names
    sim_reset_seconds: float = api.SIM_RESET_SECONDS
    sim_replace_seconds: float = api.SIM_REPLACE_SECONDS
    namespace: str = api.DEFAULT_NAMESPACE  # where provider Jobs run (the controller's namespace)
    image: str = ""  # the controller's own image: the default image of provider Jobs
    image_pull_secrets: tuple[str, ...] = ()  # Secrets of ``namespace`` provider Jobs pull their image with
    nodes: NodeCache | None = None  # the controller's node cache (None: providers read nodes from the API)
    host_reboot_command: tuple[str, ...] = api.DEFAULT_HOST_REBOOT_ARGV  # the operator's (--host-reboot-command)
    allow_lists: AllowLists = NO_ENTRIES  # the operator's (--allow-lists): a setting held to one must be an entry
