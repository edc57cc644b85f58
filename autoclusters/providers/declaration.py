"""How a provider declares itself: its settings, its RBAC rules, its credentials, its node
guards, the actions it supports and its builder (``ProviderKind``). Each provider module
(``providers/<type>.py``) holds one ``KIND``; ``providers/registry.py`` registers it with one
line, and ``deploy/providers.py`` derives the CRD schema, the strict parser and the Rego data
from the registry, ``deploy/controller.py`` the controller's roles."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters.providers.base import BuildContext, Provider

Builder = Callable[[Mapping[str, Any], BuildContext], Provider]


class ProviderSettingsError(ValueError):
    """Provider settings that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Setting:
    """One field of a provider's settings. ``kind``: integer, string, strings (a non-empty list), enum, boolean."""

    name: str
    kind: str
    description: str
    required: bool = False
    minimum: int | None = None
    default: Any = None
    values: tuple[str, ...] = ()
    # the operator's allow-list the value must be an entry of (autoclusters/allow_lists.py: "commands",
    # "images", "urls"); "": any value the kind takes
    allow_list: str = ""

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any]
        if self.kind == "integer":
            s = {"type": "integer"}
            if self.minimum is not None:
                s["minimum"] = self.minimum
        elif self.kind == "string":
            s = {"type": "string", "minLength": 1}
        elif self.kind == "strings":
            s = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
        elif self.kind == "enum":
            s = {"type": "string", "enum": list(self.values)}
        elif self.kind == "boolean":
            s = {"type": "boolean"}
        else:  # pragma: no cover - a typo in KINDS
            raise AssertionError(self.kind)
        if self.default is not None:
            s["default"] = self.default
        s["description"] = self.description
        return s

    def check(self, value: Any, where: str) -> Any:
        bad = ""
        if self.kind == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                bad = "must be an integer"
            elif self.minimum is not None and value < self.minimum:
                bad = f"must be an integer >= {self.minimum}"
        elif self.kind == "string":
            if not isinstance(value, str) or not value:
                bad = "must be a non-empty string"
        elif self.kind == "strings":
            if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v for v in value):
                bad = "must be a non-empty list of non-empty strings"
            else:
                value = list(value)
        elif self.kind == "enum" and value not in self.values:
            bad = f"must be one of {'|'.join(self.values)}"
        elif self.kind == "boolean" and not isinstance(value, bool):
            bad = "must be true or false"
        if bad:
            raise ProviderSettingsError(f"{where}.{self.name} {bad}, got {value!r}")
        return value


@dataclass(frozen=True)
class Rule:
    """One RBAC rule a provider needs: cluster-wide, or in the controller's namespace; limited to
    the objects ``names`` names when it has any (RBAC's ``resourceNames``)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    namespaced: bool = False
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeGuard:
    """What the controller writes on a marked node for a provider's backend, as Karpenter's
    do-not-disrupt: on a node carrying ``label``, each of ``annotations`` is set to "true"
    while the node is marked (one a user set already stays theirs) and removed with the marking;
    ``stamp_marked_at``: the node also gets the time of its marking."""

    label: str
    annotations: tuple[str, ...]
    stamp_marked_at: bool = False


@dataclass(frozen=True)
class CredentialSource:
    """Where a provider's credentials come from: a Secret of the controller's namespace (``secret``,
    with ``keys``; the controller may read that one Secret: a rule of the provider's roles), and/or
    the controller pod's workload identity (IRSA, EKS Pod Identity, GKE Workload Identity).
    ``setting``: the provider setting that chooses between the two, when both are offered."""

    secret: str = ""
    keys: tuple[str, ...] = ()
    workload_identity: bool = False
    setting: str = ""

    def rules(self) -> tuple[Rule, ...]:
        return (Rule("", "secrets", ("get",), namespaced=True, names=(self.secret,)),) if self.secret else ()


@dataclass(frozen=True)
class ProviderKind:
    """One provider, declared in its own module (``providers/<type>.py``) and registered with one
    line in ``providers/registry.py``: the CRD schema, the parser, the controller's roles, the
    pool policy's Rego data and the docs derive from it."""

    type: str  # the pool's spec.provider.type (a ProviderType member for a built-in provider)
    actions: tuple[str, ...]  # names of the action table (providers/actions.py)
    description: str
    settings: tuple[Setting, ...] = ()
    rules: tuple[Rule, ...] = ()  # beyond the controller's own (nodes get/list/watch/patch, pods, events)
    credentials: CredentialSource | None = None  # None: it needs none
    guards: tuple[NodeGuard, ...] = ()
    build: Builder | None = field(default=None, compare=False)  # the provider from its checked settings
    local_only: bool = False  # its rights are granted on a local (kwok) cluster only
    # (action, as): an action the pool may give it that it carries out as another of its actions,
    # which the repair is then recorded, drained, approved and proved as (clusterapi: a reset is
    # a Machine's deletion, a replacement); the controller asks ``carried_out_as``
    carries_out: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", str(self.type))  # a plain string (YAML, JSON, Rego)
        object.__setattr__(self, "actions", tuple(str(a) for a in self.actions))
        object.__setattr__(self, "carries_out", tuple((str(a), str(b)) for a, b in self.carries_out))
        for action, done_as in self.carries_out:
            if action not in self.actions or done_as not in self.actions or action == done_as:
                raise ValueError(f"provider {self.type!r}: carries_out ({action}, {done_as}) must name two "
                                 f"different actions of its own ({', '.join(self.actions)})")

    def carried_out_as(self, action: str) -> str:
        """The action a repair of ``action`` by this provider is (``action`` itself but where
        ``carries_out`` maps it)."""
        return next((b for a, b in self.carries_out if a == action), str(action))

    @property
    def rbac(self) -> tuple[Rule, ...]:
        """Every rule it needs: its own and its credentials Secret's."""
        return self.rules + (self.credentials.rules() if self.credentials else ())

    def setting(self, name: str) -> Setting | None:
        return next((s for s in self.settings if s.name == name), None)

    def allow_listed(self, settings: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
        """(setting name, allow-list, value) of each of ``settings`` held to an operator's list
        (``Setting.allow_list``), in the order of the declaration."""
        for s in self.settings:
            if s.allow_list and s.name in settings:
                yield s.name, s.allow_list, settings[s.name]
