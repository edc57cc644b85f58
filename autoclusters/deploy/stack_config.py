"""The stack's settings: the ``autoclusters:*`` keys of a Pulumi stack, parsed into ``StackConfig``.

Its pools are parsed by the pool model (``autoclusters/pools/``); the rest names what the
object builders of ``deploy/`` write (namespace, images, the detector's and the controller's
settings, monitoring, allow-lists).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters import allow_lists, api
from autoclusters.deploy import DEFAULT_IMAGE
from autoclusters.deploy.alerts import APPROVAL_WAIT_ALERT_SECONDS
from autoclusters.deploy.controller_flags import ControllerFlagsError, controller_flags
from autoclusters.deploy.detector_settings import DetectorConfigError, DetectorSettings
from autoclusters.deploy.monitoring import Monitoring, MonitoringConfigError
from autoclusters.deploy.nvml_reach import NvmlConfigError, NvmlReach, nvml_from_config
from autoclusters.deploy.pod_settings import PodSettings, PodSettingsError
from autoclusters.deploy.providers import KINDS, parse_provider_choice
from autoclusters.deploy.workloads import CONTROLLER
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX, Names, event_source_error
from autoclusters.pools.default_pool import check_spec
from autoclusters.pools.pool_config import _DNS_LABEL, NodeBackend, PoolConfig, PoolConfigError, _take, pool_from_config


@dataclass(frozen=True)
class StackConfig:
    """The whole stack's settings (``autoclusters:*`` keys of a Pulumi stack)."""

    pools: tuple[PoolConfig, ...] = ()
    domain: str = DEFAULT_DOMAIN
    condition_prefix: str = DEFAULT_PREFIX
    namespace: str = api.DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    opa_image: str = "openpolicyagent/opa:1.22.4-static"
    local: bool = False
    webhook_url: str | None = None
    event_source: str = CONTROLLER  # the controller's events' source.component ("nodepool-service": the reference)
    controller_shards: int = 1  # controller Deployments, each owning the pools hashed to it (controller.shards)
    # the cluster default policy (pools.default_pool): a pool spec for nodes whose pool label names no pool
    default_pool: Mapping[str, Any] = field(default_factory=lambda: {"consentMode": api.DEFAULT_CONSENT_MODE.value})
    # PodMonitors and a PrometheusRule for the Prometheus Operator (deploy.monitoring)
    monitoring: Monitoring = field(default_factory=Monitoring)
    # what the host-reboot Job runs in the host (controller --host-reboot-command): the operator's, not a pool's
    host_reboot_command: str = api.HOST_REBOOT_COMMAND
    # "<class>:<code>" keys whose warnings raise the fault condition (the detector's --condition-codes):
    # the detector's half of a pool's spec.repairCodes opt-in for an application or software code
    detector_condition_codes: tuple[str, ...] = ()
    # where the detectors read the kernel log: /dev/kmsg or the host's journal (api.KernelLogSource)
    kernel_log_source: api.KernelLogSource = api.DEFAULT_KERNEL_LOG_SOURCE
    # where the detectors read DCGM from (deploy.detector_settings)
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    # where the detector finds the driver's libnvidia-ml.so.1 (deploy.nvml_reach: search order, host mount,
    # runtime class)
    nvml: NvmlReach = field(default_factory=NvmlReach)
    # where the pods run and what they carry, per part, and the image pull secrets (deploy.pod_settings)
    pods: PodSettings = field(default_factory=PodSettings)
    # the controller's flags an operator tunes, as (flag, value) (deploy.controller_flags)
    controller_flags: tuple[tuple[str, str], ...] = ()
    # the commands, images and URLs pools may name (autoclusters/allow_lists.py): the operator's, not a pool's
    allow_lists: allow_lists.AllowLists = allow_lists.NONE
    # the providers whose rights the controller gets (deploy.controller); None: those in use, the
    # stack's pools' and the default pool's (pools added later by GitOps need theirs listed)
    controller_providers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_pool", check_spec(self.default_pool))
        if not _DNS_LABEL.match(self.namespace or ""):
            raise PoolConfigError(f"namespace {self.namespace!r} must be a DNS label")
        for image, key in ((self.image, "image"), (self.opa_image, "opaImage")):
            if not isinstance(image, str) or not image or any(c.isspace() for c in image):
                raise PoolConfigError(f"{key} {image!r} must be a container image reference")
        if not isinstance(self.local, bool):
            raise PoolConfigError(f"local must be true or false, got {self.local!r}")
        try:
            api.host_reboot_argv(self.host_reboot_command)
        except ValueError as e:
            raise PoolConfigError(f"hostRebootCommand: {e}") from None
        if self.webhook_url is not None and not str(self.webhook_url).startswith("https://"):
            raise PoolConfigError(f"webhookUrl {self.webhook_url!r} must be an https:// URL")
        seen: set[str] = set()
        for pool in self.pools:
            if pool.name in seen:
                raise PoolConfigError(f"pool {pool.name!r} is listed twice")
            seen.add(pool.name)
        if not isinstance(self.allow_lists, allow_lists.AllowLists):
            raise PoolConfigError(f"allowLists must be an AllowLists, got {type(self.allow_lists).__name__}")
        for pool in self.pools:
            refused = pool.allow_list_refusals(self.allow_lists)
            if refused:
                raise PoolConfigError(f"pool {pool.name!r}: {refused[0]}")
            if pool.nodes.backend == NodeBackend.SIMULATED and not self.local:
                raise PoolConfigError(f"pool {pool.name!r}: simulated nodes need local: true (a kwok cluster)")
        self.names  # validates domain and prefix  # noqa: B018
        why = event_source_error(self.event_source)
        if why:
            raise PoolConfigError(f"eventSource: {why}")
        if isinstance(self.controller_shards, bool) or not isinstance(self.controller_shards, int) \
                or self.controller_shards < 1:
            raise PoolConfigError(f"controllerShards must be an integer >= 1, got {self.controller_shards!r}")
        if self.kernel_log_source not in api.DAEMONSET_KERNEL_LOG_SOURCES:
            raise PoolConfigError(f"kernelLogSource {self.kernel_log_source!r} must be one of "
                                  f"{', '.join(s.value for s in api.DAEMONSET_KERNEL_LOG_SOURCES)}")
        object.__setattr__(self, "kernel_log_source", api.KernelLogSource(self.kernel_log_source))
        if not isinstance(self.monitoring, Monitoring):
            raise PoolConfigError(f"monitoring must be a Monitoring, got {type(self.monitoring).__name__}")
        codes = self.detector_condition_codes
        if isinstance(codes, str) or not all(isinstance(c, str) and re.match(api.REPAIR_CODE_PATTERN, c)
                                             for c in codes):
            raise PoolConfigError(f"detectorConditionCodes must be a list of <class>:<code> (e.g. gpu:13), "
                                  f"got {codes!r}")
        object.__setattr__(self, "detector_condition_codes", tuple(sorted(set(codes))))
        if not isinstance(self.nvml, NvmlReach):
            raise PoolConfigError(f"nvml must be an NvmlReach, got {type(self.nvml).__name__}")
        if not isinstance(self.pods, PodSettings):
            raise PoolConfigError(f"pods must be a PodSettings, got {type(self.pods).__name__}")
        if self.controller_providers is not None:
            self._check_controller_providers(self.controller_providers)

    def _check_controller_providers(self, listed: Any) -> None:
        if isinstance(listed, str) or not isinstance(listed, list | tuple):
            raise PoolConfigError(f"controllerProviders must be a list of provider types, got {listed!r}")
        types: list[str] = []
        for t in listed:
            if not isinstance(t, str) or t not in KINDS:
                raise PoolConfigError(f"controllerProviders: {t!r} is not one of {'|'.join(KINDS)}")
            types.append(t)
        local_only = next((t for t in types if KINDS[t].local_only), None)
        if local_only is not None and not self.local:
            raise PoolConfigError(f"controllerProviders: {local_only} needs local: true (a kwok cluster)")
        missing = [f"{t} (used by {where})" for t, where in self.providers_in_use().items() if t not in types]
        if missing:
            raise PoolConfigError(f"controllerProviders leaves out providers in use: {', '.join(missing)}")
        object.__setattr__(self, "controller_providers", tuple(dict.fromkeys(types)))

    def providers_in_use(self) -> dict[str, str]:
        """Each provider type the stack's pools or its default pool name, with the first that does."""
        choices = [(f"pool {p.name!r}", p.provider) for p in self.pools]
        choices.append(("defaultPool", parse_provider_choice(self.default_pool.get("provider"))))
        used: dict[str, str] = {}
        for where, choice in choices:
            for spec in (choice.default, *choice.own.values()):
                if spec is not None:
                    used.setdefault(spec.type, where)
        return used

    @property
    def granted_providers(self) -> tuple[str, ...]:
        """The providers whose rights the controller gets: ``controllerProviders``, else those in use."""
        if self.controller_providers is not None:
            return self.controller_providers
        return tuple(t for t in KINDS if t in self.providers_in_use())

    @property
    def slurm_bridge(self) -> bool:
        """The Slurm bridge's identity is deployed: a pool of the stack enables Slurm."""
        return any(pool.slurm.enabled for pool in self.pools)

    @property
    def names(self) -> Names:
        try:
            return Names(domain=self.domain, prefix=self.condition_prefix)
        except ValueError as e:
            raise PoolConfigError(str(e)) from None


# The ``autoclusters:*`` stack settings StackConfig reads, and the type each has in the stack
# configuration (components/stack.py reads them with pulumi.Config accordingly).
STACK_SETTINGS: dict[str, str] = {
    "pools": "object", "domain": "string", "conditionPrefix": "string", "namespace": "string",
    "image": "string", "opaImage": "string", "local": "bool", "webhookUrl": "string", "eventSource": "string",
    "defaultPool": "object", "controllerShards": "int", "monitoring": "object", "hostRebootCommand": "string",
    "detectorConditionCodes": "object", "kernelLogSource": "string", "detector": "object", "nvml": "object",
    "pods": "object", "imagePullSecrets": "object", "controller": "object",
    allow_lists.STACK_SETTING: "object", "controllerProviders": "object",
}


def stack_config_from_dict(data: Mapping[str, Any]) -> StackConfig:
    """Parses the ``autoclusters:`` namespace of a stack's configuration (camelCase keys)."""
    raw = _take(data, set(STACK_SETTINGS), "stack config autoclusters")
    pools = raw.get("pools", [])
    if not isinstance(pools, list):
        raise PoolConfigError("pools must be a list of pool objects")
    defaults = StackConfig()
    return StackConfig(
        pools=tuple(pool_from_config(p) for p in pools),
        domain=raw.get("domain", defaults.domain),
        condition_prefix=raw.get("conditionPrefix", defaults.condition_prefix),
        namespace=raw.get("namespace", defaults.namespace),
        image=raw.get("image", defaults.image),
        opa_image=raw.get("opaImage", defaults.opa_image),
        local=_bool(raw.get("local", False), "local"),
        webhook_url=raw.get("webhookUrl"),
        event_source=raw.get("eventSource", defaults.event_source),
        default_pool=raw.get("defaultPool", defaults.default_pool),
        controller_shards=_int(raw.get("controllerShards", defaults.controller_shards), "controllerShards"),
        monitoring=_monitoring(raw.get("monitoring", {})),
        host_reboot_command=raw.get("hostRebootCommand", defaults.host_reboot_command),
        detector_condition_codes=_codes(raw.get("detectorConditionCodes", [])),
        kernel_log_source=raw.get("kernelLogSource", defaults.kernel_log_source),
        detector=_detector(raw.get("detector", {})),
        nvml=_nvml(raw.get("nvml", {})),
        pods=_pods(raw.get("pods", {}), raw.get("imagePullSecrets", [])),
        controller_flags=_controller_flags(raw.get("controller", {})),
        allow_lists=_allow_lists(raw.get(allow_lists.STACK_SETTING)),
        controller_providers=raw.get("controllerProviders"),
    )


def _controller_flags(data: Any) -> tuple[tuple[str, str], ...]:
    try:
        return controller_flags(data)
    except ControllerFlagsError as e:
        raise PoolConfigError(str(e)) from None


def _pods(pods: Any, pull_secrets: Any) -> PodSettings:
    try:
        return PodSettings(components=pods, image_pull_secrets=pull_secrets)
    except PodSettingsError as e:
        raise PoolConfigError(str(e)) from None


def _allow_lists(data: Any) -> allow_lists.AllowLists:
    try:
        return allow_lists.from_config(data)
    except allow_lists.AllowListError as e:
        raise PoolConfigError(str(e)) from None


def _codes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise PoolConfigError(f"detectorConditionCodes must be a list of <class>:<code>, got {value!r}")
    return tuple(value)


def _detector(data: Any) -> DetectorSettings:
    raw = _take(data, {"dcgmHost", "dcgmExporterUrl", "windowSeconds"}, "detector")
    try:
        return DetectorSettings(dcgm_host=raw.get("dcgmHost", ""), dcgm_exporter_url=raw.get("dcgmExporterUrl", ""),
                                window_seconds=raw.get("windowSeconds"))
    except DetectorConfigError as e:
        raise PoolConfigError(str(e)) from None


def _nvml(data: Any) -> NvmlReach:
    raw = _take(data, {"enabled", "search", "hostRoot", "runtimeClassName"}, "nvml")
    try:
        return nvml_from_config(raw, _bool)
    except NvmlConfigError as e:
        raise PoolConfigError(str(e)) from None


def _monitoring(data: Any) -> Monitoring:
    raw = _take(data, {"prometheusOperator", "labels", "approvalWaitAlertSeconds"}, "monitoring")
    try:
        return Monitoring(prometheus_operator=_bool(raw.get("prometheusOperator", False),
                                                    "monitoring.prometheusOperator"),
                          labels=raw.get("labels") or {},
                          approval_wait_alert_seconds=_int(raw.get("approvalWaitAlertSeconds",
                                                                   APPROVAL_WAIT_ALERT_SECONDS),
                                                           "monitoring.approvalWaitAlertSeconds"))
    except MonitoringConfigError as e:
        raise PoolConfigError(str(e)) from None


def _int(value: Any, where: str) -> int:
    """An integer setting; stack config values set with ``pulumi config set`` may arrive as strings."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise PoolConfigError(f"{where} must be an integer, got {value!r}")


def _bool(value: Any, where: str) -> bool:
    """Stack config values set with ``pulumi config set`` arrive as strings."""
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise PoolConfigError(f"{where} must be true or false, got {value!r}")
