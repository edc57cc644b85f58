"""Which pool a node belongs to: the one rule, read by the controller and the operator tools.

1. The node's pool label (``<domain>/nodepool.name``) names a pool that has no
   ``nodeSelector``: the node is in that pool.
2. Otherwise the first pool, in order of name, whose ``nodeSelector`` matches the node's
   labels.
3. Otherwise, when the node's pool label names no GpuNodePool at all (valid or not) and a
   cluster default policy is in force (``pools.default_pool``), the node is in the pool its
   label names, under that default policy.
4. Otherwise the node is in no pool (no consent mode applies; the controller leaves it alone).

The label comes first because it is the per-node, explicit statement: it is what a Pulumi
pool writes on its nodes and what workloads schedule on (``nodeSelector`` of a training
job), so the consent mode the team chose for a pool protects the jobs running on its
nodes even when another pool's selector also matches them (e.g. a ``zone=z1`` pool). A
pool with a ``nodeSelector`` is defined by that selector alone; a pool label naming it
does not add a node its selector does not match.

Only valid pools (``pool_from_config`` accepts them) select nodes: the controller ignores
a pool object it cannot parse, so the operator tools do too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from autoclusters.deploy.providers import ProviderSettingsError, parse_provider_choice
from autoclusters.kube.objects import selector_matches
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfig, PoolConfigError, pool_from_config


def config_of(obj: Mapping[str, Any]) -> PoolConfig:
    """The configuration a ``GpuNodePool`` object holds; PoolConfigError names the bad field.

    Invalid provider settings do not make the pool invalid: its nodes still belong to it and
    their faults are reported, only its repairs are held. The configuration then has no
    provider, and ``provider_error`` says why.
    """
    name = (obj.get("metadata") or {}).get("name", "")
    spec = dict(obj.get("spec") or {})
    raw_provider = spec.pop("provider", None)
    config = pool_from_config({"name": name, **spec})
    try:
        return replace(config, provider=parse_provider_choice(raw_provider, "spec.provider"))
    except ProviderSettingsError:
        return config


def provider_error(obj: Mapping[str, Any]) -> str:
    """Why the pool object's ``spec.provider`` cannot be used ("" when it can)."""
    try:
        parse_provider_choice((obj.get("spec") or {}).get("provider"), "spec.provider")
    except ProviderSettingsError as e:
        return str(e)
    return ""


class Membership:
    """The membership rule over one set of pools (rebuilt when a pool changes)."""

    def __init__(self, pools: Iterable[PoolConfig], names: Names, *, default: bool = False,
                 invalid: Iterable[str] = ()) -> None:
        pools = list(pools)
        self._label = names.pool_label
        self._by_label = {p.name: p for p in pools if p.node_selector is None}
        self._selecting = sorted((p for p in pools if p.node_selector is not None), key=lambda p: p.name)
        self.pools = tuple(pools)
        self._default = default
        self._known = {p.name for p in pools} | set(invalid)

    def is_default(self, pool: str) -> bool:
        """Whether ``pool`` (a label value) is handled under the cluster default policy."""
        return self._default and bool(pool) and pool not in self._known

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]], names: Names, *, default: bool = False
                     ) -> tuple[Membership, dict[str, str]]:
        """The rule over the valid pool objects, and the invalid ones' errors by pool name."""
        valid: list[PoolConfig] = []
        invalid: dict[str, str] = {}
        for obj in objs:
            try:
                valid.append(config_of(obj))
            except PoolConfigError as e:
                invalid[str((obj.get("metadata") or {}).get("name", ""))] = str(e)
        return cls(valid, names, default=default, invalid=invalid), invalid

    def pool_of(self, node: Mapping[str, Any] | None) -> str | None:
        """The name of the node's pool, or None."""
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        named = labels.get(self._label)
        if named and named in self._by_label:
            return str(named)
        for pool in self._selecting:
            if selector_matches(pool.node_selector or {}, labels):
                return pool.name
        if named and self.is_default(str(named)):
            return str(named)
        return None
