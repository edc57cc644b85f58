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

from autoclusters import allow_lists, api, pool_fields
from autoclusters.api import ClassAction, ConsentMode, FaultClass
from autoclusters.deploy.providers import (
    NO_PROVIDER,
    ProviderChoice,
    ProviderSettingsError,
    parse_provider_choice,
)
from autoclusters.names import Names
from autoclusters.pools import allow_listed
from autoclusters.pools.slurm_policy import SlurmPolicy, SlurmSpecError, slurm_from_config, slurm_spec
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
        return allow_listed.named_fields(provider=self.provider, hook_url=hook.url if hook else "",
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
