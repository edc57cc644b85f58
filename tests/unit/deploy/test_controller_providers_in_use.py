"""The controller's rights are the union of what the providers in use need: the stack's pools'
and its default pool's, or the stack's ``controllerProviders``; the rendered manifests grant
every provider but the simulated."""

from __future__ import annotations

from typing import Any

import pytest

from autoclusters.deploy.providers import KINDS, ProviderType
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import stack_config_from_dict
from autoclusters.pools.pool_config import PoolConfigError
from components.render import render

HOST_REBOOT_POOL = {"name": "a100", "provider": {"type": "hostReboot"}}
KARPENTER_REPLACE = {"name": "h100", "provider": {"reset": {"type": "hostReboot"}, "replace": {"type": "karpenter"}}}


def _granted(objs: list[dict[str, Any]]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(group, resource, verb, resourceNames) of every rule of the controller's ClusterRole and Roles."""
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")
             and o["metadata"]["name"].startswith("autoclusters-controller")]
    return {(g, r, v, tuple(rule.get("resourceNames", []))) for role in roles for rule in role["rules"]
            for g in rule.get("apiGroups", []) for r in rule.get("resources", []) for v in rule.get("verbs", [])}


def _provider_rights(t: ProviderType) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(rule.group, rule.resource, verb, rule.names) for rule in KINDS[t].rbac for verb in rule.verbs}


def test_a_stack_grants_the_providers_its_pools_use_and_no_other() -> None:
    config = stack_config_from_dict({"pools": [HOST_REBOOT_POOL, KARPENTER_REPLACE]})
    assert config.granted_providers == (ProviderType.HOST_REBOOT, ProviderType.KARPENTER)
    granted = _granted(stack_objects(config))
    assert _provider_rights(ProviderType.HOST_REBOOT) | _provider_rights(ProviderType.KARPENTER) <= granted
    assert not _provider_rights(ProviderType.CLUSTERAPI) & granted
    assert not _provider_rights(ProviderType.SIMULATED) & granted


def test_the_default_pools_provider_is_in_use() -> None:
    config = stack_config_from_dict({"defaultPool": {"consentMode": "auto", "provider": {"type": "clusterapi"}}})
    assert config.granted_providers == (ProviderType.CLUSTERAPI,)


def test_controller_providers_widens_for_pools_added_later_and_may_not_narrow_below_use() -> None:
    config = stack_config_from_dict({"pools": [HOST_REBOOT_POOL], "controllerProviders": ["hostReboot", "clusterapi"]})
    assert _provider_rights(ProviderType.CLUSTERAPI) <= _granted(stack_objects(config))
    with pytest.raises(PoolConfigError, match=r"leaves out providers in use: hostReboot \(used by pool 'a100'\)"):
        stack_config_from_dict({"pools": [HOST_REBOOT_POOL], "controllerProviders": ["clusterapi"]})
    with pytest.raises(PoolConfigError, match="'aws' is not one of"):
        stack_config_from_dict({"controllerProviders": ["aws"]})
    with pytest.raises(PoolConfigError, match="simulated needs local: true"):
        stack_config_from_dict({"controllerProviders": ["simulated"]})


def test_the_rendered_manifests_grant_every_provider_but_the_simulated() -> None:
    import yaml

    objs = [o for text in render().values() for o in yaml.safe_load_all(text) if o]
    granted = _granted(objs)
    for t in ProviderType:
        assert (_provider_rights(t) <= granted) == (t != ProviderType.SIMULATED), t
