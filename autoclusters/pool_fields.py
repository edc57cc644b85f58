"""The pool's field table: every scalar setting of ``GpuNodePool.spec``, declared once.

Each ``Setting`` gives its path in the spec, its kind, default, limits and description; a rule
between settings is a ``NotAbove`` (``closeBelowPercent`` may not exceed ``openAbovePercent``)
or an ``Excludes`` (two booleans that may not both be true). Everything else is derived from
this table:

- the strict parser and the writer (``pools/pool_config.py``, ``pools/slurm_policy.py``: the
  keys each object of the spec takes, the checks, the spec written with every default),
- the CRD schema with its CEL rules (``deploy/crds.py``),
- the Rego data the pool policy checks generically (``policies/lib/pool_fields.rego``,
  generated from ``rego_data`` by ``make manifests``),
- docs/contract.md's table of pool settings (``docs_table``).

``tests/unit/rego/test_policy_data_pool_fields_parity.py`` runs generated valid and invalid pools
through the parser and ``opa eval``, ``tests/integration/test_pool_fields_crd.py`` through the
API server: the three accept exactly the same pools.

The structured parts of the spec (``faultClasses``, ``repairCodes``, ``nodeSelector``,
``preDrain.hook``'s ``url`` and ``command``, ``slurm.nodeName``, ``provider``) keep their own
code: each is a map, a selector, a choice between two keys or a plug-in's settings, not one
value (``OTHER_KEYS`` names those inside the table's objects).

This module is plumbing (rank 0): it imports the enums of ``api`` and ``doc_tables`` and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from autoclusters import api, doc_tables


class Kind(StrEnum):
    """What a setting holds (its CRD type, how the parser and the Rego check it)."""

    INTEGER = "integer"  # a whole number in minimum..maximum
    BOOLEAN = "boolean"
    ENUM = "enum"  # one value of a StrEnum of api.py, or of a list of choices
    NAMES = "names"  # a list of distinct strings, each matching a pattern


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


@dataclass(frozen=True)
class Setting:
    """One setting of ``GpuNodePool.spec``."""

    path: str  # in the spec, dotted: "drain.resetDeadlineSeconds"
    kind: Kind
    default: Any
    description: str
    minimum: int | None = None  # INTEGER
    maximum: int | None = None  # INTEGER; None: no upper bound
    enum: type[StrEnum] | None = None  # ENUM: the values of an enum of api.py ...
    choices: tuple[str, ...] = ()  # ... or these
    pattern: str = ""  # NAMES: each entry
    pattern_words: str = ""  # NAMES: the pattern in words, for messages
    attr: str = ""  # the attribute of the parsed pool that holds it; default: the key in snake case

    def __post_init__(self) -> None:
        if self.kind == Kind.INTEGER and (self.minimum is None or self.error(self.default)):
            raise ValueError(f"{self.path}: an integer setting needs a minimum and a default within its range")
        if (self.kind == Kind.ENUM) != ((self.enum is not None) != bool(self.choices)) or (
                self.kind == Kind.NAMES) != bool(self.pattern):
            raise ValueError(f"{self.path}: an enum or choices go with ENUM, a pattern with NAMES")
        if not self.attr:
            object.__setattr__(self, "attr", _snake(self.key))

    @property
    def key(self) -> str:
        """Its key in its object of the spec: ``resetDeadlineSeconds``."""
        return self.path.rsplit(".", 1)[-1]

    @property
    def group(self) -> str:
        """The object of the spec that holds it: ``drain``, ``preDrain.hook``, ``""`` (the spec)."""
        return self.path.rpartition(".")[0]

    @property
    def rule(self) -> str:
        """The pool policy's rule that reports it (docs/admission.md): pool-<first key, kebab case>."""
        return rule_of(self.path)

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(m.value for m in self.enum) if self.enum is not None else self.choices

    @property
    def words(self) -> str:
        """An enum's values for messages ("" written as "")."""
        return ", ".join(v or '""' for v in self.values)

    # --- derived forms -----------------------------------------------------------------
    def schema(self) -> dict[str, Any]:
        """Its CRD (OpenAPI v3) schema."""
        if self.kind == Kind.INTEGER:
            s: dict[str, Any] = {"type": "integer", "minimum": self.minimum, "default": self.default}
            if self.maximum is not None:
                s["maximum"] = self.maximum
        elif self.kind == Kind.BOOLEAN:
            s = {"type": "boolean", "default": self.default}
        elif self.kind == Kind.ENUM:
            s = {"type": "string", "enum": list(self.values), "default": str(self.default)}
        else:
            s = {"type": "array", "default": list(self.default), "items": {"type": "string", "pattern": self.pattern}}
        s["description"] = self.description
        if self.kind == Kind.NAMES:
            s["x-kubernetes-list-type"] = "set"  # the API server refuses a name listed twice
        return s

    def rego(self) -> dict[str, Any]:
        """What the pool policy needs to check it (policies/lib/pool_fields.rego)."""
        d: dict[str, Any] = {"kind": self.kind.value, "at": self.path.split("."), "rule": self.rule,
                             "default": list(self.default) if self.kind == Kind.NAMES else self.default}
        if self.kind == Kind.INTEGER:
            d["minimum"] = self.minimum
            if self.maximum is not None:
                d["maximum"] = self.maximum
        if self.kind == Kind.ENUM:
            d["values"], d["words"] = list(self.values), self.words
        if self.kind == Kind.NAMES:
            d["pattern"], d["pattern_words"] = self.pattern, self.pattern_words
        return d

    def allowed(self) -> str:
        """The values it takes, in words (docs/contract.md)."""
        if self.kind == Kind.INTEGER:
            return f"{self.minimum} to {self.maximum}" if self.maximum is not None else f"≥ {self.minimum}"
        if self.kind == Kind.BOOLEAN:
            return "true, false"
        if self.kind == Kind.ENUM:
            return ", ".join(f"`{v}`" if v else '`""`' for v in self.values)
        return f"distinct names, each {self.pattern_words}"

    # --- checks (the parser's) ---------------------------------------------------------
    def error(self, value: Any) -> str:
        """Why ``value`` is not a valid setting ("" when it is)."""
        if self.kind == Kind.INTEGER:
            assert self.minimum is not None
            if isinstance(value, int) and not isinstance(value, bool) and value >= self.minimum and (
                    self.maximum is None or value <= self.maximum):
                return ""
            if self.maximum is not None:
                return f"must be an integer in {self.minimum}..{self.maximum}, got {value!r}"
            return f"must be an integer >= {self.minimum}, got {value!r}"
        if self.kind == Kind.BOOLEAN:
            return "" if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if self.kind == Kind.ENUM:
            return "" if value in self.values else f"must be one of {self.words.replace(', ', '|')}, got {value!r}"
        if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
            return f"must be a list of names, got {value!r}"
        for name in value:
            if not isinstance(name, str) or not re.match(self.pattern, name):
                return f"entry {name!r} must be {self.pattern_words}"
        return "lists a name twice" if len(set(value)) != len(value) else ""

    def parse(self, value: Any) -> Any:
        """``value`` (valid: ``error`` says "") in the parsed pool's type."""
        if self.kind == Kind.ENUM and self.enum is not None:
            return self.enum(value)
        return tuple(value) if self.kind == Kind.NAMES else value

    def written(self, value: Any) -> Any:
        """The parsed ``value`` as the spec writes it."""
        return list(value) if self.kind == Kind.NAMES else (str(value) if self.kind == Kind.ENUM else value)


def rule_of(path: str) -> str:
    """The policy rule of a setting or object of the spec: ``pool-circuit-breaker``."""
    return "pool-" + _snake(path.split(".", 1)[0]).replace("_", "-")


@dataclass(frozen=True)
class NotAbove:
    """A rule between two integer settings of one object: ``lesser`` <= ``greater``."""

    lesser: Setting
    greater: Setting

    def __post_init__(self) -> None:
        if self.lesser.group != self.greater.group or {self.lesser.kind, self.greater.kind} != {Kind.INTEGER}:
            raise ValueError(f"{self.lesser.path} <= {self.greater.path}: two integer settings of one object")

    @property
    def group(self) -> str:
        return self.lesser.group

    @property
    def settings(self) -> tuple[Setting, Setting]:
        return self.lesser, self.greater

    @property
    def message(self) -> str:
        return f"{self.lesser.key} must not exceed {self.greater.key}"

    @property
    def rule(self) -> str:
        """The pool policy's rule that reports it."""
        return rule_of(self.lesser.path)

    def cel(self) -> dict[str, str]:
        """The CEL rule on the group's object (the API server applies the defaults first)."""
        lo, hi = self.lesser.key, self.greater.key
        return {"rule": f"!has(self.{lo}) || !has(self.{hi}) || self.{lo} <= self.{hi}", "message": self.message}

    def error(self, lesser: int, greater: int) -> str:
        """The parser's words when ``lesser`` > ``greater`` ("" when it holds)."""
        if lesser <= greater:
            return ""
        return f"{self.lesser.path} ({lesser}) must not exceed {self.greater.key} ({greater})"

    def rego(self) -> dict[str, Any]:
        return {"lesser": self.lesser.path, "greater": self.greater.path, "rule": self.rule}


@dataclass(frozen=True)
class Excludes:
    """Two boolean settings that may not both be true (in any objects of the spec)."""

    first: Setting
    second: Setting
    why: str  # the message's second half: what would go wrong

    def __post_init__(self) -> None:
        if {self.first.kind, self.second.kind} != {Kind.BOOLEAN}:
            raise ValueError(f"{self.first.path} excludes {self.second.path}: two boolean settings")

    @property
    def group(self) -> str:
        """The innermost object of the spec that holds both (its CEL rule sits there)."""
        common: list[str] = []
        for x, y in zip(self.first.group.split("."), self.second.group.split("."), strict=False):
            if x != y:
                break
            common.append(x)
        return ".".join(common)

    @property
    def settings(self) -> tuple[Setting, Setting]:
        return self.first, self.second

    @property
    def message(self) -> str:
        return f"{self.first.path} and {self.second.path} exclude each other: {self.why}"

    @property
    def rule(self) -> str:
        return rule_of(self.first.path)

    def cel(self) -> dict[str, str]:
        def true(s: Setting) -> str:  # the setting is given and true (has() on each object on the way)
            parts = s.path.split(".")[len(self.group.split(".")) if self.group else 0:]
            steps = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
            return " && ".join([*(f"has(self.{p})" for p in steps), f"self.{steps[-1]}"])

        return {"rule": f"!({true(self.first)} && {true(self.second)})", "message": self.message}

    def error(self, first: bool, second: bool) -> str:
        return self.message if first and second else ""

    def rego(self) -> dict[str, Any]:
        return {"settings": [self.first.path, self.second.path], "rule": self.rule, "message": self.message}


# --- the table -----------------------------------------------------------------------------
def _int(path: str, default: int, minimum: int, maximum: int | None = None, *, description: str,
         attr: str = "") -> Setting:
    return Setting(path, Kind.INTEGER, default, description, minimum=minimum, maximum=maximum, attr=attr)


CONSENT_MODE = Setting("consentMode", Kind.ENUM, api.DEFAULT_CONSENT_MODE, "; ".join(
    f"{m}: {what}" for m, what in api.CONSENT_MODE_SUMMARY.items()) + ".", enum=api.ConsentMode)
MAX_CONCURRENT_REPAIRS = _int("maxConcurrentRepairs", 1, 1, description=(
    "At most this many of the pool's nodes are draining, acting or verifying at once."))
BREAKER_OPEN_ABOVE_PERCENT = _int("circuitBreaker.openAbovePercent", 30, 1, 100, description=(
    "Automatic repairs pause while more than this share of the pool's nodes is faulty."))
BREAKER_CLOSE_BELOW_PERCENT = _int("circuitBreaker.closeBelowPercent", 20, 1, 100, description=(
    "A paused pool resumes repairs once the faulty share falls below this."))
BREAKER_MIN_NODES = _int("circuitBreaker.minNodes", 0, 0, description=(
    "The breaker stays closed in a pool of fewer nodes than this."))
RESET_DEADLINE_SECONDS = _int("drain.resetDeadlineSeconds", 300, 1, attr="reset_deadline_seconds", description=(
    "Pods still on the node this long after eviction starts are deleted before a reset."))
REPLACE_DEADLINE_SECONDS = _int("drain.replaceDeadlineSeconds", 600, 1, attr="replace_deadline_seconds",
                                description="The same deadline before a replacement.")
REFAULT_WINDOW_SECONDS = _int("escalation.refaultWindowSeconds", 900, 1, description=(
    "The same fault within this long after a reset escalates to a replacement."))
RESET_MEMORY_SECONDS = _int("escalation.resetMemorySeconds", 86400, 1, description=(
    "A fault of the class a reset repaired within this long is replaced directly."))
MAX_REPAIRS = _int("attemptBudget.maxRepairs", 3, 1, description=(
    "At most this many repairs of one node per window; then a person is needed."))
ATTEMPT_WINDOW_SECONDS = _int("attemptBudget.windowSeconds", 604800, 1, attr="attempt_window_seconds",
                              description="The window of the attempt budget.")
PRE_DRAIN_WAIT_SECONDS = _int("preDrain.waitSeconds", 120, 0, description=(
    "Longest wait after the warning (node and pod annotations, events, hook) before eviction starts; ends "
    "early when every acknowledger and every pod labelled drain-wait=true acked."))
# A pre-drain acknowledger's name becomes the annotation key <domain>/drain-ack-<name>: a DNS
# label short enough that the key's name part stays within 63 characters.
ACKNOWLEDGERS = Setting("preDrain.acknowledgers", Kind.NAMES, (), (
    "Node-level preparers (e.g. slurm) that ack with the node annotation <domain>/drain-ack-<name> = the "
    "Remediation's name."), pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$",
    pattern_words="a short DNS label (lower case, digits, '-', at most 40 characters)")
SLINKY = Setting("preDrain.slinky", Kind.BOOLEAN, False,
                 "Write nodeset.slinky.slurm.net/node-cordon-reason before cordoning.")
# The most a pool may give its pre-drain hook: a hook is a notice, not a wait (a preparer that
# needs time acknowledges, docs/workloads.md), each running hook holds one of the controller's
# hook threads, and eviction waits for the hook's end. At most the default pre-drain wait, so
# under the defaults the hook ends by the warning's deadline and never pushes eviction towards
# the drain deadlines (300 s, 600 s), when pods are deleted. Refused above it (CRD, parser,
# Rego), never clamped: the pool's author learns at admission, not from a hook cut short later.
PRE_DRAIN_HOOK_TIMEOUT_SECONDS = _int("preDrain.hook.timeoutSeconds", 10, 1, PRE_DRAIN_WAIT_SECONDS.default,
                                      description="The hook's call (HTTP POST or command) is given up after this "
                                                  "long; at most the default pre-drain wait.")
SLURM_ENABLED = Setting("slurm.enabled", Kind.BOOLEAN, False, (
    "The Slurm bridge drains, signals, requeues and resumes the Slurm node of each of the pool's nodes."))
SLURM_SIGNAL = Setting("slurm.signal", Kind.ENUM, "TERM", (
    "Signal sent to the node's jobs when the drain starts (\"\": none)."), choices=("", *api.SLURM_SIGNALS))
SLURM_SIGNAL_TO = Setting("slurm.signalTo", Kind.ENUM, api.SignalTarget.STEPS, (
    "Which processes of each job get the signal: steps (every job step), batch (the batch shell), all."),
    enum=api.SignalTarget)
SLURM_SIGNAL_LEAD_SECONDS = _int("slurm.signalLeadSeconds", 60, 0, description=(
    "Time between the signal and the requeue."))
SLURM_REQUEUE = Setting("slurm.requeue", Kind.BOOLEAN, True, "Requeue each signalled job once it has ended.")
SLURM_ACT_ON_EXTERNAL_DRAINS = Setting("slurm.actOnExternalDrains", Kind.BOOLEAN, False, (
    "Cordon the node while an admin or a health check drains its Slurm node; default: report only."))

SETTINGS: tuple[Setting, ...] = (
    CONSENT_MODE, MAX_CONCURRENT_REPAIRS, BREAKER_OPEN_ABOVE_PERCENT, BREAKER_CLOSE_BELOW_PERCENT, BREAKER_MIN_NODES,
    RESET_DEADLINE_SECONDS, REPLACE_DEADLINE_SECONDS, REFAULT_WINDOW_SECONDS, RESET_MEMORY_SECONDS, MAX_REPAIRS,
    ATTEMPT_WINDOW_SECONDS, PRE_DRAIN_WAIT_SECONDS, ACKNOWLEDGERS, SLINKY, PRE_DRAIN_HOOK_TIMEOUT_SECONDS,
    SLURM_ENABLED, SLURM_SIGNAL, SLURM_SIGNAL_TO, SLURM_SIGNAL_LEAD_SECONDS, SLURM_REQUEUE,
    SLURM_ACT_ON_EXTERNAL_DRAINS)

RULES: tuple[NotAbove | Excludes, ...] = (
    # a close threshold above the open one would make the breaker flap
    NotAbove(BREAKER_CLOSE_BELOW_PERCENT, BREAKER_OPEN_ABOVE_PERCENT),
    Excludes(SLURM_ENABLED, SLINKY, "on a Slinky cluster slurm-operator drains and undrains Slurm itself (from the "
                                    "cordon reason)"),
)

# The keys of an object of the table that are not settings: structured parts, with their own
# checks in the parser, the CRD and the Rego. Every other key of a table object is unknown.
OTHER_KEYS: dict[str, tuple[str, ...]] = {"preDrain.hook": ("url", "command"), "slurm": ("nodeName",)}
# preDrain.hook.url (the hook's other form is a command: a non-empty list of non-empty strings).
HOOK_URL_PATTERN = r"^https?://\S+$"
# The structured fields whose value must be an entry of one of the operator's allow-lists
# (autoclusters/allow_lists.py; a provider's settings name theirs in its module, providers/<type>.py): the pool
# policy refuses any other value, the controller never runs or calls one.
# The keys of the spec a pool editor may change (deploy/pool_roles.py): the consent mode and the
# limits. Everything else (the provider, the pre-drain hook and wait, the selector, the repair
# choices, Slurm) is a pool author's.
EDITOR_KEYS = ("consentMode", "maxConcurrentRepairs", "circuitBreaker", "drain", "escalation", "attemptBudget")
ALLOW_LISTED: dict[str, str] = {"preDrain.hook.command": "commands", "preDrain.hook.url": "urls"}

INTEGERS = tuple(s for s in SETTINGS if s.kind == Kind.INTEGER)


def settings_of(group: str) -> tuple[Setting, ...]:
    """The settings of one object of the spec (``"drain"``), or of its top level (``""``)."""
    return tuple(s for s in SETTINGS if s.group == group)


def rules_of(group: str) -> tuple[NotAbove | Excludes, ...]:
    return tuple(r for r in RULES if r.group == group)


def groups() -> tuple[str, ...]:
    """Every object of the spec that holds a setting, parents before children."""
    found: list[str] = []
    for s in SETTINGS:
        parts = s.group.split(".") if s.group else []
        for i in range(1, len(parts) + 1):
            g = ".".join(parts[:i])
            if g not in found:
                found.append(g)
    return tuple(found)


def keys_of(group: str) -> tuple[str, ...]:
    """The keys one object of the table takes: its settings, the objects in it, its other keys."""
    prefix = f"{group}." if group else ""
    children = [g.removeprefix(prefix) for g in groups() if g.startswith(prefix) and g != group]
    return (*(s.key for s in settings_of(group)), *(c for c in children if "." not in c), *OTHER_KEYS.get(group, ()))


def given(raw: Mapping[str, Any], group: str) -> dict[str, Any]:
    """The settings of ``group`` that ``raw`` (one object of a spec) gives, by the parsed
    pool's attribute: the keyword arguments of its dataclass (the rest take their defaults)."""
    return {s.attr: raw[s.key] for s in settings_of(group) if s.key in raw}


def spec_of(holder: Any, group: str) -> dict[str, Any]:
    """The settings of ``group`` as the spec writes them, from the parsed object that holds them."""
    return {s.key: s.written(getattr(holder, s.attr)) for s in settings_of(group)}


# --- label selectors (spec.nodeSelector, slurm.nodeName) ---------------------------------
# The syntax of Kubernetes label keys (a name of at most 63 characters with an optional DNS
# subdomain prefix) and values (at most 63 characters), as k8s.io/apimachinery's validation
# (IsQualifiedName, IsValidLabelValue) defines them; "[.]" rather than an escaped dot, so that a
# pattern reads the same in Python, RE2 (the CRD, OPA) and a CEL string.
LABEL_KEY_PATTERN = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                     r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")  # a matchExpressions operator
SELECTOR_OPERATORS_WITH_VALUES = ("In", "NotIn")  # these need values; the others take none
# The most matchLabels a pool's selector takes: the bound that keeps the CRD's CEL check of
# every key within the API server's cost budget (a pool selects on a few labels).
SELECTOR_MAX_LABELS = 64


# --- derived forms -------------------------------------------------------------------------
def rego_data() -> dict[str, Any]:
    """What the pool policy checks generically (policies/lib/pools.rego)."""
    return {
        "settings": {s.path: s.rego() for s in SETTINGS},
        "groups": {g: {"at": g.split("."), "rule": rule_of(g), "keys": list(keys_of(g))} for g in groups()},
        "not_above": [r.rego() for r in RULES if isinstance(r, NotAbove)],
        "excludes": [r.rego() for r in RULES if isinstance(r, Excludes)],
        "hook_url_pattern": HOOK_URL_PATTERN,
        "allow_listed": {path: {"at": path.split("."), "list": kind} for path, kind in ALLOW_LISTED.items()},
        "selector": {"key_pattern": LABEL_KEY_PATTERN, "value_pattern": LABEL_VALUE_PATTERN,
                     "operators": list(SELECTOR_OPERATORS), "with_values": list(SELECTOR_OPERATORS_WITH_VALUES),
                     "max_labels": SELECTOR_MAX_LABELS},
    }


def rego_module() -> str:
    """``policies/lib/pool_fields.rego`` (a test keeps the file equal)."""
    return api.generated_rego_module(package="autoclusters.lib.pool_fields", rule="pool_fields",
                                     title="The pool's field table", source="autoclusters/pool_fields.py",
                                     test="tests/unit/rego/test_policy_data_pool_fields_parity.py", data=rego_data())


def docs_table() -> str:
    """docs/contract.md's table of pool settings."""
    lines = ["| setting | default | allowed | what it does |", "|---|---|---|---|"]
    for s in SETTINGS:
        default = f"{s.default:,}" if s.kind == Kind.INTEGER else (
            "`[]`" if s.kind == Kind.NAMES else f"`{str(s.default).lower() if s.kind == Kind.BOOLEAN else s.default}`")
        words = re.sub(r"(\S*<[^>]+>\S*)", r"`\1`", s.description)  # <domain> is code, not HTML
        lines.append(f"| `{s.path}` | {default} | {s.allowed()} | {words} |")
    for r in RULES:
        shown = (f"`{r.lesser.path}` ≤ `{r.greater.path}`" if isinstance(r, NotAbove)
                 else f"not both `{r.first.path}` and `{r.second.path}`")
        lines.append(f"| {shown} | — | — | {r.message} |")
    return "\n".join(lines)


DOCS_MARKER = "<!-- pool-settings-table"


def with_docs_table(text: str) -> str:
    """``text`` (docs/contract.md) with the table after its marker line replaced by ``docs_table``."""
    return doc_tables.with_table(text, DOCS_MARKER, docs_table())


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--docs"]:  # make manifests: python -m autoclusters.pool_fields --docs docs/contract.md
        doc_tables.rewrite(sys.argv[2], DOCS_MARKER, docs_table())
    else:
        print(rego_module(), end="")
