"""GPU node pools: the typed, validated pool configuration and the ``GpuNodePool`` object.

The same configuration arrives three ways (a Pulumi component argument, the stack's
``autoclusters:pools`` config list, a pool object kept in git), so it is parsed in one place
with a strict schema: an unknown key or a bad value fails here with a message that names
the pool and the field, not later as a controller that silently ignores a typo.

Every scalar setting (its key, default, limits, the rules between settings) comes from the
pool's field table, ``autoclusters/pool_fields.py``: the keys each object of the spec takes,
the checks and the spec written out are derived from it here. The dataclasses below hold the
parsed values; each setting's attribute takes the table's default (a unit test checks it).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters import api, pool_fields
from autoclusters.api import ClassAction, ConsentMode, FaultClass
from autoclusters.deploy import DEFAULT_IMAGE, allow_lists
from autoclusters.deploy.alerts import APPROVAL_WAIT_ALERT_SECONDS
from autoclusters.deploy.controller_flags import ControllerFlagsError, controller_flags
from autoclusters.deploy.detector_settings import DetectorConfigError, DetectorSettings
from autoclusters.deploy.monitoring import Monitoring, MonitoringConfigError
from autoclusters.deploy.nvml import NvmlConfigError, NvmlReach, nvml_from_config
from autoclusters.deploy.pod_settings import PodSettings, PodSettingsError
from autoclusters.deploy.pool_slurm import SlurmPolicy, SlurmSpecError, slurm_from_config, slurm_spec
from autoclusters.deploy.providers import (
    KINDS,
    NO_PROVIDER,
    ProviderChoice,
    ProviderSettingsError,
    host_reboot_argv,
    parse_provider_choice,
)
from autoclusters.deploy.workloads import CONTROLLER
from autoclusters.names import DEFAULT_DOMAIN, DEFAULT_PREFIX, Names, event_source_error
from autoclusters.providers.actions import ACTIONS as ACTION_TABLE
from autoclusters.redact import redact

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(pool_fields.LABEL_VALUE_PATTERN)
_LABEL_KEY = re.compile(pool_fields.LABEL_KEY_PATTERN)


class PoolConfigError(ValueError):
    """A pool or stack setting that cannot be deployed; the message names the field."""


class NodeBackend(enum.StrEnum):
    """Where a pool's nodes come from: created on the local cluster, or already there."""

    SIMULATED = "simulated"
    EXISTING = "existing"


@dataclass(frozen=True)
class CircuitBreaker:
    open_above_percent: int = pool_fields.BREAKER_OPEN_ABOVE_PERCENT.default
    close_below_percent: int = pool_fields.BREAKER_CLOSE_BELOW_PERCENT.default
    min_nodes: int = pool_fields.BREAKER_MIN_NODES.default


@dataclass(frozen=True)
class PreDrainHook:
    """Called once when the warning goes out: an HTTP POST to ``url`` or ``command`` run with
    the same JSON on stdin. A failure is reported (event) and never holds the repair."""

    url: str = ""
    command: tuple[str, ...] = ()
    timeout_seconds: int = pool_fields.PRE_DRAIN_HOOK_TIMEOUT_SECONDS.default


@dataclass(frozen=True)
class PreDrain:
    """The warning before the drain: how long eviction may wait and for whom."""

    wait_seconds: int = pool_fields.PRE_DRAIN_WAIT_SECONDS.default  # the longest wait after the warning
    acknowledgers: tuple[str, ...] = pool_fields.ACKNOWLEDGERS.default  # e.g. ("slurm",): <domain>/drain-ack-<name>
    hook: PreDrainHook | None = None
    slinky: bool = pool_fields.SLINKY.default  # write Slinky's node-cordon-reason before cordoning


@dataclass(frozen=True)
class Nodes:
    """The pool's node backend: ``count`` simulated nodes, or existing nodes matched by ``selector``."""

    backend: NodeBackend = NodeBackend.EXISTING
    count: int = 0
    selector: Mapping[str, str] = field(default_factory=dict)
    gpu_product: str = "NVIDIA-A100-SXM4-80GB"
    gpus_per_node: int = 8
    instance_type: str = "a100-80gb-sxm-ib.8x"


@dataclass(frozen=True)
class PoolConfig:
    """One GPU node pool; field names mirror ``GpuNodePool.spec`` in snake case."""

    name: str
    consent_mode: ConsentMode = pool_fields.CONSENT_MODE.default
    fault_classes: Mapping[str, ClassAction] = field(default_factory=dict)
    repair_codes: Mapping[str, str] = field(default_factory=dict)  # "gpu:13" -> reset (explicit opt-in)
    max_concurrent_repairs: int = pool_fields.MAX_CONCURRENT_REPAIRS.default
    circuit_breaker: CircuitBreaker = CircuitBreaker()
    reset_deadline_seconds: int = pool_fields.RESET_DEADLINE_SECONDS.default  # drain.*, escalation.* and
    replace_deadline_seconds: int = pool_fields.REPLACE_DEADLINE_SECONDS.default  # attemptBudget.* live here
    refault_window_seconds: int = pool_fields.REFAULT_WINDOW_SECONDS.default
    reset_memory_seconds: int = pool_fields.RESET_MEMORY_SECONDS.default
    max_repairs: int = pool_fields.MAX_REPAIRS.default
    attempt_window_seconds: int = pool_fields.ATTEMPT_WINDOW_SECONDS.default
    provider: ProviderChoice = NO_PROVIDER  # none: repairs are held, never guessed
    node_selector: Mapping[str, Any] | None = None
    nodes: Nodes = Nodes()
    pre_drain: PreDrain = PreDrain()
    slurm: SlurmPolicy = field(default_factory=SlurmPolicy)

    def allow_listed(self) -> list[tuple[str, allow_lists.AllowList, Any]]:
        """(field, list, value) of each command, image or URL this pool names."""
        hook = self.pre_drain.hook
        return allow_lists.named_fields(provider=self.provider, hook_url=hook.url if hook else "",
                                        hook_command=hook.command if hook else ())

    def allow_list_refusals(self, lists: allow_lists.AllowLists) -> list[str]:
        """Why the operator's allow-lists refuse this pool: each command, image or URL it names
        that is no entry of its list (empty: the pool may be used)."""
        return [why for where, kind, value in self.allow_listed() if (why := lists.refusal(kind, value, where))]

    def __post_init__(self) -> None:
        where = f"pool {self.name!r}"
        if not isinstance(self.name, str) or not _DNS_LABEL.match(self.name):
            raise PoolConfigError(f"pool name {self.name!r} must be a DNS label (lower case, digits, '-')")
        actions = {}
        for cls, action in dict(self.fault_classes).items():
            if cls not in set(FaultClass):
                raise PoolConfigError(f"{where}: faultClasses has unknown class {cls!r}; "
                                      f"expected one of {', '.join(FaultClass)}")
            actions[cls] = _enum(ClassAction, action, f"{where}: faultClasses.{cls}")
        object.__setattr__(self, "fault_classes", actions)
        codes: dict[str, str] = {}
        for key, repair in dict(self.repair_codes).items():
            if not isinstance(key, str) or not re.match(api.REPAIR_CODE_PATTERN, key):
                raise PoolConfigError(f"{where}: repairCodes key {key!r} must be <class>:<code> with class one of "
                                      f"{', '.join(FaultClass)} (e.g. gpu:13)")
            if not isinstance(repair, str) or repair not in ACTION_TABLE:  # any action of the table
                raise PoolConfigError(f"{where}: repairCodes.{key} must be one of "
                                      f"{'|'.join(ACTION_TABLE.names())}, got {repair!r}")
            codes[key] = ACTION_TABLE[repair].name
        object.__setattr__(self, "repair_codes", codes)
        _check_settings(self, where)
        if self.node_selector is not None:
            object.__setattr__(self, "node_selector", _label_selector(self.node_selector, f"{where}: nodeSelector"))
        if not isinstance(self.provider, ProviderChoice):
            try:
                object.__setattr__(self, "provider", parse_provider_choice(self.provider))
            except ProviderSettingsError as e:
                raise PoolConfigError(f"{where}: {e}") from None
        n = self.nodes
        _enum(NodeBackend, n.backend, f"{where}: nodes.backend")
        if n.backend == NodeBackend.SIMULATED:
            _positive(n.count, f"{where}: nodes.count")
            _positive(n.gpus_per_node, f"{where}: nodes.gpusPerNode")
        elif n.count:
            raise PoolConfigError(f"{where}: nodes.count applies to the simulated backend only")
        for label_key, label_value in dict(n.selector).items():
            if not isinstance(label_key, str) or not _LABEL_KEY.match(label_key):
                raise PoolConfigError(f"{where}: nodes.selector key {label_key!r} is not a label key")
            if not isinstance(label_value, str) or not _LABEL_VALUE.match(label_value):
                raise PoolConfigError(f"{where}: nodes.selector value {label_value!r} for {label_key} "
                                      "is not a label value")
        try:
            self.slurm.check(where)
        except SlurmSpecError as e:
            raise PoolConfigError(str(e)) from None
        _check_pre_drain(self.pre_drain, where)


def _holder(pool: PoolConfig, group: str) -> Any:
    """The parsed object that holds the settings of one object of the spec (None: absent)."""
    holders: dict[str, Any] = {"": pool, "drain": pool, "escalation": pool, "attemptBudget": pool,
                               "circuitBreaker": pool.circuit_breaker, "preDrain": pool.pre_drain,
                               "preDrain.hook": pool.pre_drain.hook, "slurm": pool.slurm}
    return holders[group]


def _check_settings(pool: PoolConfig, where: str) -> None:
    """Every setting of the field table and every rule between settings; valid values take the
    parsed form (a consent mode its enum, a list of names a tuple)."""
    for group in ("", *pool_fields.groups()):
        holder = _holder(pool, group)
        if holder is None:
            continue
        for setting in pool_fields.settings_of(group):
            value = getattr(holder, setting.attr)
            why = setting.error(value)
            if why:
                raise PoolConfigError(f"{where}: {setting.path} {why}")
            object.__setattr__(holder, setting.attr, setting.parse(value))
    for rule in pool_fields.RULES:
        holders = [_holder(pool, s.group) for s in rule.settings]
        if None not in holders:
            why = rule.error(*(getattr(h, s.attr) for h, s in zip(holders, rule.settings, strict=True)))
            if why:
                raise PoolConfigError(f"{where}: {why}")


def _keys(group: str, *structured: str) -> set[str]:
    """The keys one object of the spec takes (the field table's), and ``structured``."""
    return {*pool_fields.keys_of(group), *structured}


def _check_pre_drain(pd: PreDrain, where: str) -> None:
    hook = pd.hook
    if hook is None:
        return
    if bool(hook.url) == bool(hook.command):
        raise PoolConfigError(f"{where}: preDrain.hook needs exactly one of url or command")
    if hook.url and (not isinstance(hook.url, str) or not re.match(pool_fields.HOOK_URL_PATTERN, hook.url)):
        raise PoolConfigError(f"{where}: preDrain.hook.url {redact(str(hook.url))!r} must be an http:// or "
                              "https:// URL")  # the pool's Valid condition and its event show this
    if hook.command and (isinstance(hook.command, str) or not all(isinstance(a, str) and a for a in hook.command)):
        raise PoolConfigError(f"{where}: preDrain.hook.command must be a list of non-empty strings "
                              "(the program and its arguments)")


def _enum(kind: type[enum.StrEnum], value: Any, where: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = "|".join(m.value for m in kind)
        raise PoolConfigError(f"{where} must be one of {allowed}, got {value!r}") from None


def _positive(value: Any, where: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PoolConfigError(f"{where} must be an integer >= 1, got {value!r}")


def _label_selector(value: Any, where: str) -> dict[str, Any]:
    """A pool's ``nodeSelector``: a Kubernetes label selector that selects something.

    An empty one is refused (the CRD refuses it too): in Kubernetes it would match every
    node, which is never what a pool means; leaving ``nodeSelector`` out uses the pool label.
    """
    sel = _take(value, {"matchLabels", "matchExpressions"},
                f"{where} (a label selector: matchLabels and/or matchExpressions)")
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise PoolConfigError(f"{where}.matchLabels must be a mapping of label keys to values")
    if len(labels) > pool_fields.SELECTOR_MAX_LABELS:
        raise PoolConfigError(f"{where}.matchLabels has {len(labels)} labels, at most "
                              f"{pool_fields.SELECTOR_MAX_LABELS} are allowed")
    for key, val in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise PoolConfigError(f"{where}.matchLabels key {key!r} is not a label key")
        if not isinstance(val, str) or not _LABEL_VALUE.match(val):
            raise PoolConfigError(f"{where}.matchLabels value {val!r} for {key} is not a label value")
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise PoolConfigError(f"{where}.matchExpressions must be a list")
    for i, raw in enumerate(exprs):
        e = _take(raw, {"key", "operator", "values"}, f"{where}.matchExpressions[{i}]")
        if not isinstance(e.get("key"), str) or not _LABEL_KEY.match(e["key"]):
            raise PoolConfigError(f"{where}.matchExpressions[{i}].key {e.get('key')!r} is not a label key")
        if e.get("operator") not in pool_fields.SELECTOR_OPERATORS:
            raise PoolConfigError(f"{where}.matchExpressions[{i}].operator must be one of "
                                  f"{'|'.join(pool_fields.SELECTOR_OPERATORS)}, got {e.get('operator')!r}")
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) and _LABEL_VALUE.match(v) for v in values):
            raise PoolConfigError(f"{where}.matchExpressions[{i}].values must be a list of label values")
        needs = e["operator"] in pool_fields.SELECTOR_OPERATORS_WITH_VALUES
        if needs != bool(values):
            raise PoolConfigError(f"{where}.matchExpressions[{i}]: operator {e['operator']} "
                                  + ("needs values" if needs else "takes no values"))
    if not labels and not exprs:
        raise PoolConfigError(f"{where} is empty, which would select every node; give matchLabels or "
                              "matchExpressions, or leave nodeSelector out to use the pool label")
    return sel


def _take(data: Mapping[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PoolConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PoolConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return dict(data)


def _mapping(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PoolConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    return dict(data)


def pool_from_config(data: Mapping[str, Any]) -> PoolConfig:
    """Parses one pool written in the stack config / GpuNodePool spec vocabulary (camelCase)."""
    raw = _take(data, _keys("", "name", "faultClasses", "repairCodes", "provider", "nodeSelector", "nodes", "slurm"),
                "pool")
    if "name" not in raw:
        raise PoolConfigError("pool: 'name' is required")
    where = f"pool {raw['name']!r}"
    cb, drain, esc, budget = (_take(raw.get(group, {}), _keys(group), f"{where}: {group}")
                              for group in ("circuitBreaker", "drain", "escalation", "attemptBudget"))
    nodes = _take(raw.get("nodes", {}), {"backend", "count", "selector", "gpuProduct", "gpusPerNode", "instanceType"},
                  f"{where}: nodes")
    try:
        provider = parse_provider_choice(raw.get("provider"))
    except ProviderSettingsError as e:
        raise PoolConfigError(f"{where}: {e}") from None
    defaults = Nodes()
    pre_drain = _pre_drain_from(raw.get("preDrain", {}), where)
    try:
        slurm = slurm_from_config(raw.get("slurm", {}), where)
    except SlurmSpecError as e:
        raise PoolConfigError(str(e)) from None
    return PoolConfig(
        name=raw["name"],
        **pool_fields.given(raw, ""), **pool_fields.given(drain, "drain"), **pool_fields.given(esc, "escalation"),
        **pool_fields.given(budget, "attemptBudget"),
        fault_classes=_take(raw.get("faultClasses", {}), set(FaultClass), f"{where}: faultClasses"),
        repair_codes=_mapping(raw.get("repairCodes", {}), f"{where}: repairCodes"),
        circuit_breaker=CircuitBreaker(**pool_fields.given(cb, "circuitBreaker")),
        provider=provider,
        node_selector=raw.get("nodeSelector"),
        nodes=Nodes(
            backend=_enum(NodeBackend, nodes.get("backend", NodeBackend.EXISTING), f"{where}: nodes.backend"),
            count=nodes.get("count", 0),
            selector=dict(nodes.get("selector", {})),
            gpu_product=nodes.get("gpuProduct", defaults.gpu_product),
            gpus_per_node=nodes.get("gpusPerNode", defaults.gpus_per_node),
            instance_type=nodes.get("instanceType", defaults.instance_type),
        ),
        pre_drain=pre_drain,
        slurm=slurm,
    )


def _pre_drain_from(data: Any, where: str) -> PreDrain:
    raw = _take(data, _keys("preDrain"), f"{where}: preDrain")
    hook = None
    if raw.get("hook") is not None:
        h = _take(raw["hook"], _keys("preDrain.hook"), f"{where}: preDrain.hook")
        url, command = h.get("url"), h.get("command")  # each, when given, as the CRD takes it
        if command is not None and (not isinstance(command, list) or not command):
            raise PoolConfigError(f"{where}: preDrain.hook.command must be a list of non-empty strings "
                                  "(the program and its arguments)")
        if url is not None and not (isinstance(url, str) and re.match(pool_fields.HOOK_URL_PATTERN, url)):
            raise PoolConfigError(f"{where}: preDrain.hook.url {redact(str(url))!r} must be an http:// or "
                                  "https:// URL")  # the pool's Valid condition and its event show this
        hook = PreDrainHook(url=url or "", command=tuple(command or ()), **pool_fields.given(h, "preDrain.hook"))
    return PreDrain(**pool_fields.given(raw, "preDrain"), hook=hook)


def pre_drain_spec(pd: PreDrain) -> dict[str, Any]:
    """``spec.preDrain`` with every default written out."""
    spec = pool_fields.spec_of(pd, "preDrain")
    if pd.hook is not None:
        hook: dict[str, Any] = {"url": pd.hook.url} if pd.hook.url else {"command": list(pd.hook.command)}
        spec["hook"] = {**hook, **pool_fields.spec_of(pd.hook, "preDrain.hook")}
    return spec


def pool_spec(pool: PoolConfig) -> dict[str, Any]:
    """The ``GpuNodePool.spec`` the controller reads; every default written out, so git diffs show it."""
    spec: dict[str, Any] = {
        **pool_fields.spec_of(pool, ""),
        "faultClasses": {cls.value: pool.fault_classes.get(cls, ClassAction.DEFAULT).value for cls in FaultClass},
        "repairCodes": {key: str(action) for key, action in sorted(pool.repair_codes.items())},
        "circuitBreaker": pool_fields.spec_of(pool.circuit_breaker, "circuitBreaker"),
        **{group: pool_fields.spec_of(pool, group) for group in ("drain", "escalation", "attemptBudget")},
        "preDrain": pre_drain_spec(pool.pre_drain),
        "slurm": slurm_spec(pool.slurm),
    }
    if pool.provider.configured:
        spec["provider"] = pool.provider.to_dict()
    if pool.node_selector is not None:
        spec["nodeSelector"] = dict(pool.node_selector)
    return spec


def gpu_node_pool_object(pool: PoolConfig, names: Names) -> dict[str, Any]:
    """The cluster-scoped ``GpuNodePool`` object for ``pool``."""
    return {
        "apiVersion": f"{names.api_group}/{api.VERSION}",
        "kind": api.POOLS.kind,
        "metadata": {"name": pool.name, "labels": {"app.kubernetes.io/part-of": "autoclusters"}},
        "spec": pool_spec(pool),
    }


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
    # the cluster default policy (deploy.default_pool): a pool spec for nodes whose pool label names no pool
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
    # where the detector finds the driver's libnvidia-ml.so.1 (deploy.nvml: search order, host mount, runtime class)
    nvml: NvmlReach = field(default_factory=NvmlReach)
    # where the pods run and what they carry, per part, and the image pull secrets (deploy.pod_settings)
    pods: PodSettings = field(default_factory=PodSettings)
    # the controller's flags an operator tunes, as (flag, value) (deploy.controller_flags)
    controller_flags: tuple[tuple[str, str], ...] = ()
    # the commands, images and URLs pools may name (deploy.allow_lists): the operator's, not a pool's
    allow_lists: allow_lists.AllowLists = allow_lists.NONE
    # the providers whose rights the controller gets (deploy.controller); None: those in use, the
    # stack's pools' and the default pool's (pools added later by GitOps need theirs listed)
    controller_providers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        from autoclusters.deploy.default_pool import check_spec  # it builds on this module

        object.__setattr__(self, "default_pool", check_spec(self.default_pool))
        if not _DNS_LABEL.match(self.namespace or ""):
            raise PoolConfigError(f"namespace {self.namespace!r} must be a DNS label")
        for image, key in ((self.image, "image"), (self.opa_image, "opaImage")):
            if not isinstance(image, str) or not image or any(c.isspace() for c in image):
                raise PoolConfigError(f"{key} {image!r} must be a container image reference")
        if not isinstance(self.local, bool):
            raise PoolConfigError(f"local must be true or false, got {self.local!r}")
        try:
            host_reboot_argv(self.host_reboot_command)
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
