"""The stack program: read the ``autoclusters:*`` configuration, validate it, deploy.

``__main__.py`` runs :func:`program`; the Automation API (tests, the demo) passes the same
function as an inline program, so both paths deploy exactly the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.runtime.config as runtime_config

from autoclusters.deploy.pools import PoolConfigError, StackConfig, stack_config_from_dict
from components.autoclusters import AutoClusters, AutoClustersArgs

NAMESPACE = "autoclusters"
# Keys read here rather than by StackConfig: they say how to reach the cluster, not what to deploy.
_ACCESS_KEYS = {"kubeconfig"}


def raw_config(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits ``autoclusters:*`` entries (values as Pulumi stores them: JSON text) into the
    deployment settings and the access settings."""
    settings: dict[str, Any] = {}
    access: dict[str, Any] = {}
    for key, value in values.items():
        ns, _, name = key.partition(":")
        if ns != NAMESPACE:
            continue
        if name.startswith("config:"):  # older "project:config:key" form
            name = name.removeprefix("config:")
        try:
            parsed = json.loads(value) if isinstance(value, str) else value
        except json.JSONDecodeError:
            parsed = value
        if name in ("domain", "conditionPrefix", "namespace", "image", "opaImage", "webhookUrl", "kubeconfig",
                    "eventSource"):
            parsed = value  # strings stay strings even when they look like JSON numbers
        (access if name in _ACCESS_KEYS else settings)[name] = parsed
    return settings, access


def read_stack_config() -> tuple[StackConfig, dict[str, Any]]:
    values = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    settings, access = raw_config(values)
    try:
        return stack_config_from_dict(settings), access
    except PoolConfigError as e:
        raise PoolConfigError(f"invalid stack configuration: {e}") from None


def program() -> None:
    config, access = read_stack_config()
    kubeconfig = access.get("kubeconfig")
    lister = None
    if any(p.nodes.selector for p in config.pools):
        from autoclusters.kube import load_kube

        kube = load_kube(kubeconfig)

        def lister(selector: Mapping[str, str]) -> list[str]:
            sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            return sorted(n["metadata"]["name"] for n in kube.list_nodes(sel))

    system = AutoClusters("autoclusters", AutoClustersArgs(config=config, kubeconfig=kubeconfig, node_lister=lister))
    pulumi.export("namespace", system.namespace)
    pulumi.export("pools", system.pools)
    pulumi.export("webhookConfiguration", system.webhook_configuration_name)
