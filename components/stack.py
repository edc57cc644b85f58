"""The stack program: read the ``autoclusters:*`` configuration, validate it, deploy.

``__main__.py`` runs :func:`program`; the Automation API (tests, the demo) passes the same
function as an inline program, so both paths deploy exactly the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.runtime.config as runtime_config

from autoclusters.deploy.kubernetes_version import too_old
from autoclusters.deploy.stack_config import STACK_SETTINGS, StackConfig, stack_config_from_dict
from autoclusters.kube import KubeError, load_kube
from autoclusters.pools.pool_config import PoolConfigError
from components.autoclusters import AutoClusters, AutoClustersArgs

NAMESPACE = "autoclusters"
# The deployment settings (StackConfig's keys) and how each is typed in the stack configuration.
SETTINGS = STACK_SETTINGS
# Keys read here rather than by StackConfig: they say how to reach the cluster, not what to deploy.
ACCESS: dict[str, str] = {"kubeconfig": "string"}


def configured_keys() -> set[str]:
    """The ``autoclusters:*`` key names the stack sets (names only: the values are read
    through ``pulumi.Config``), so that a typo is an error instead of a silent default."""
    names = {**(runtime_config.get_config_env() or {}), **runtime_config.CONFIG.get()}
    out = set()
    for key in names:
        ns, _, name = key.partition(":")
        if ns == NAMESPACE:
            out.add(name.removeprefix("config:"))  # older "project:config:key" form
    return out


def _read(config: pulumi.Config, key: str, kind: str) -> Any:
    try:
        if kind == "object":
            return config.get_object(key)
        if kind == "bool":
            return config.get_bool(key)
        if kind == "int":
            return config.get_int(key)
        return config.get(key)
    except (pulumi.ConfigTypeError, ValueError) as e:  # get_object raises the JSON error as is
        raise PoolConfigError(f"{NAMESPACE}:{key}: {e}") from None


def read_stack_config(config: pulumi.Config | None = None, keys: set[str] | None = None
                      ) -> tuple[StackConfig, dict[str, Any]]:
    """The stack's settings, read with ``pulumi.Config`` (typed), validated by StackConfig."""
    config = config or pulumi.Config(NAMESPACE)
    unknown = sorted((configured_keys() if keys is None else keys) - SETTINGS.keys() - ACCESS.keys())
    try:
        if unknown:
            raise PoolConfigError(f"unknown key(s) {', '.join(f'{NAMESPACE}:{k}' for k in unknown)}; "
                                  f"known: {', '.join(sorted({*SETTINGS, *ACCESS}))}")
        settings = {k: v for k, kind in SETTINGS.items() if (v := _read(config, k, kind)) is not None}
        access = {k: v for k, kind in ACCESS.items() if (v := _read(config, k, kind)) is not None}
        return stack_config_from_dict(settings), access
    except PoolConfigError as e:
        raise PoolConfigError(f"invalid stack configuration: {e}") from None


def provider_kubeconfig_path() -> str | None:
    """``kubernetes:kubeconfig`` when it names a file (the provider also takes the contents),
    so that a user who set the provider's kubeconfig does not have to set it twice."""
    value = pulumi.Config("kubernetes").get("kubeconfig")
    if value and "\n" not in value and not value.lstrip().startswith(("{", "apiVersion")):
        return value
    return None


def check_cluster_version(kubeconfig: str) -> None:
    """Refuses a cluster older than the system supports (``deploy.kubernetes_version``) before
    anything is registered, naming its version and what is missing, instead of a deploy that
    stops part way at the first kind the API server does not serve.

    Asked only of a kubeconfig the stack names (``autoclusters:kubeconfig``, or the provider's
    path): without one the provider picks its own default, which is not sure to be the cluster
    this would ask. A cluster that cannot be asked is left to the provider to report."""
    try:
        version = load_kube(kubeconfig, user_agent="autoclusters-pulumi").get("/version")
    except KubeError as e:  # unreadable credentials, an unreachable server: the provider's to report
        pulumi.log.warn(f"the cluster's Kubernetes version was not checked ({kubeconfig}): {e}")
        return
    why = too_old(version)
    if why:
        raise PoolConfigError(why)


def program() -> None:
    config, access = read_stack_config()
    kubeconfig = access.get("kubeconfig") or provider_kubeconfig_path()
    if kubeconfig:
        check_cluster_version(kubeconfig)
    lister = None
    if any(p.nodes.selector for p in config.pools):
        kube = load_kube(kubeconfig)

        def lister(selector: Mapping[str, str]) -> list[str]:
            sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            return sorted(n["metadata"]["name"] for n in kube.list_nodes(sel))

    system = AutoClusters("autoclusters", AutoClustersArgs(config=config, kubeconfig=kubeconfig, node_lister=lister))
    pulumi.export("namespace", system.namespace)
    pulumi.export("pools", system.pools)
    pulumi.export("webhookConfiguration", system.webhook_configuration_name)
