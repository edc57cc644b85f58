"""The repair providers a pool can name, and the typed settings of each (written once).

A pool chooses its providers in ``GpuNodePool.spec.provider``, in the shape of a
Kubernetes discriminated union (like a Deployment's ``strategy``)::

    provider:
      type: hostReboot          # the provider for every action it supports ...
      hostReboot: {timeoutSeconds: 600}
      replace:                  # ... and one per action, which wins for that action
        type: command
        command: {command: [/opt/replace-node]}

``type`` names a provider; the field named after the type holds its settings (no other
type's field may be present). ``reset`` / ``replace`` choose a provider for one action.
A pool with no provider for an action never picks one itself: the controller holds that
repair with "no repair provider configured".

Each provider declares itself in its own module (``providers/<type>.py``: a ``ProviderKind``,
``providers/declaration.py``) and ``providers/registry.py`` registers it with one line;
``KINDS`` here is that registry. Everything else derives from it: the CRD schema
(``crds.py``), the strict parser (``parse_provider_choice``, used by the stack config, the
Pulumi components and the controller), the Rego data of the pool policy (``rego_module``,
rendered to ``policies/lib/providers.rego``) and the controller's roles
(``deploy/controller.py``). The per-action fields (``reset``, ``replace``, any later action)
come from the action table (``providers/actions.py``), so a provider and an action registered
from a test module show in the schema, the parser and the roles
(tests/unit/providers/test_actions_plugin.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters.api import RepairAction, generated_rego_module
from autoclusters.providers import registry
from autoclusters.providers.actions import ACTIONS as ACTION_TABLE
from autoclusters.providers.declaration import ProviderKind as ProviderKind
from autoclusters.providers.declaration import ProviderSettingsError as ProviderSettingsError
from autoclusters.providers.declaration import Rule as Rule
from autoclusters.providers.declaration import Setting as Setting
from autoclusters.providers.types import ProviderSpec as ProviderSpec


def actions() -> tuple[str, ...]:
    """What a provider may be chosen for: the actions of the table, in its order."""
    return ACTION_TABLE.names()


class ProviderType(enum.StrEnum):
    """The built-in providers, for code that names one; ``KINDS`` holds every registered provider."""

    SIMULATED = "simulated"
    COMMAND = "command"
    CLUSTERAPI = "clusterapi"
    HOST_REBOOT = "hostReboot"
    KARPENTER = "karpenter"
    REDFISH = "redfish"
    EC2 = "ec2"


KINDS: Mapping[str, ProviderKind] = registry.KINDS  # every registered provider, by type


def register_provider(kind: ProviderKind) -> ProviderKind:
    """Adds a provider at run time, as ``providers/registry.py``'s lines do (a test's own, say)."""
    return registry.register(kind)


def unregister_provider(name: str) -> None:
    """Removes a provider a test registered."""
    registry.KINDS.pop(name, None)


def granted_providers(local: bool) -> tuple[str, ...]:
    """The providers whose rights an installation's controller gets: every one but those whose
    rights only a local (kwok) cluster needs (the simulated one's node create/delete and
    nodes/status patch; its provider refuses every node kwok does not manage)."""
    return tuple(t for t, k in KINDS.items() if local or not k.local_only)


@dataclass(frozen=True)
class ProviderChoice:
    """A pool's providers: one for every action it supports, and per-action overrides."""

    default: ProviderSpec | None = None
    own: Mapping[str, ProviderSpec] = field(default_factory=dict)  # action -> its own provider

    @property
    def reset(self) -> ProviderSpec | None:
        return self.own.get(RepairAction.RESET)

    @property
    def replace(self) -> ProviderSpec | None:
        return self.own.get(RepairAction.REPLACE)

    def for_action(self, action: str) -> ProviderSpec | None:
        own = self.own.get(action)
        if own is not None:
            return own
        if self.default is not None and action in KINDS[self.default.type].actions:
            return self.default
        return None

    @property
    def configured(self) -> bool:
        return any(self.for_action(a) for a in actions())

    def missing(self) -> tuple[str, ...]:
        """The actions every pool needs (the action table's ``every_pool``) that no provider covers."""
        return tuple(a for a in ACTION_TABLE.required() if self.for_action(a) is None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.default.to_dict() if self.default else {}
        for action in actions():
            spec = self.own.get(action)
            if spec is not None:
                out[action] = spec.to_dict()
        return out

    def describe(self) -> str:
        """``reset=hostReboot replace=command`` / ``none``, for status lines."""
        parts = [f"{a}={s.type}" for a in actions() if (s := self.for_action(a)) is not None]
        return " ".join(parts) or "none"


NO_PROVIDER = ProviderChoice()


def _parse_spec(raw: Any, where: str, *, action: str = "") -> ProviderSpec:
    if not isinstance(raw, Mapping):
        raise ProviderSettingsError(f"{where} must be a mapping with a 'type', got {type(raw).__name__}")
    allowed = {"type", *KINDS}
    if not action:
        allowed |= set(actions())
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ProviderSettingsError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; "
                                    f"allowed: {', '.join(sorted(allowed))}")
    kind_name = raw.get("type")
    kind = KINDS.get(str(kind_name)) if isinstance(kind_name, str) else None
    if kind is None:
        raise ProviderSettingsError(f"{where}.type must be one of {'|'.join(KINDS)}, got {kind_name!r}")
    others = sorted(k for k in raw if k in KINDS and k != kind.type)
    if others:
        raise ProviderSettingsError(f"{where}.{others[0]} does not apply to type {kind.type}")
    if action and action not in kind.actions:
        raise ProviderSettingsError(f"{where}.type {kind.type} cannot {action} a node "
                                    f"(it supports: {', '.join(kind.actions)})")
    settings_raw = raw.get(kind.type) or {}
    here = f"{where}.{kind.type}"
    if not isinstance(settings_raw, Mapping):
        raise ProviderSettingsError(f"{here} must be a mapping, got {type(settings_raw).__name__}")
    names = {s.name for s in kind.settings}
    unknown = sorted(set(settings_raw) - names)
    if unknown:
        raise ProviderSettingsError(f"{here}: unknown key(s) {', '.join(map(str, unknown))}; "
                                    f"allowed: {', '.join(sorted(names)) or 'none'}")
    settings: dict[str, Any] = {}
    for s in kind.settings:
        if s.name in settings_raw:
            settings[s.name] = s.check(settings_raw[s.name], here)
        elif s.required:
            raise ProviderSettingsError(f"{here}.{s.name} is required")
        elif s.default is not None:
            settings[s.name] = s.default
    return ProviderSpec(kind.type, settings)


def parse_provider_choice(raw: Any, where: str = "provider") -> ProviderChoice:
    """Strict: raises ProviderSettingsError naming the field. ``None`` / ``{}``: no provider."""
    if raw is None:
        return NO_PROVIDER
    if not isinstance(raw, Mapping):
        raise ProviderSettingsError(f"{where} must be a mapping, got {type(raw).__name__}")
    names = actions()
    own = {a: _parse_spec(raw[a], f"{where}.{a}", action=a) for a in names if a in raw}
    default = None
    if "type" in raw or set(raw) - set(names):
        default = _parse_spec({k: v for k, v in raw.items() if k not in names}, where)
    return ProviderChoice(default, own)


# --- derived forms ------------------------------------------------------------------------
def _spec_schema(*, with_actions: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"type": {"type": "string", "enum": list(KINDS),
                                      "description": "The provider; its settings go in the field of the same name."}}
    for kind in KINDS.values():
        s: dict[str, Any] = {"type": "object", "description": kind.description,
                             "properties": {x.name: x.schema() for x in kind.settings}}
        required = [x.name for x in kind.settings if x.required]
        if required:
            s["required"] = required
        props[kind.type] = s
    rules = [{"rule": f"!has(self.{k.type}) || (has(self.type) && self.type == '{k.type}')",
              "message": f"{k.type} settings apply to type {k.type} only"} for k in KINDS.values()]
    rules += [{"rule": f"!has(self.type) || self.type != '{k.type}' || has(self.{k.type})",
               "message": f"type {k.type} needs its settings in the field {k.type} "
                          f"({', '.join(x.name for x in k.settings if x.required)} required)"}
              for k in KINDS.values() if any(x.required for x in k.settings)]
    out: dict[str, Any] = {"type": "object", "properties": props}
    if with_actions:
        for action in actions():
            able = [k.type for k in KINDS.values() if action in k.actions]
            sub = _spec_schema(with_actions=False)
            sub["required"] = ["type"]
            sub["properties"]["type"] = {"type": "string", "enum": able,
                                         "description": f"The provider that {action}s this pool's nodes."}
            sub["description"] = f"The provider for {action} (overrides type for this action)."
            props[action] = sub
        out["description"] = ("Repair providers: type (and its settings) for every action it supports; reset / "
                              "replace for one action. No provider: repairs are held, never guessed.")
    else:
        rules.append({"rule": "has(self.type)", "message": "type is required"})
    out["x-kubernetes-validations"] = rules
    return out


def provider_schema() -> dict[str, Any]:
    """The OpenAPI schema of ``GpuNodePool.spec.provider``."""
    return _spec_schema(with_actions=True)


def rego_data() -> dict[str, Any]:
    """What the pool policy needs to know about providers."""
    return {
        "actions": list(actions()),
        "types": {k.type: {
            "actions": list(k.actions),
            "settings": {s.name: {"kind": s.kind, "required": s.required, "values": list(s.values),
                                  "allow_list": s.allow_list,
                                  **({"minimum": s.minimum} if s.minimum is not None else {})}
                         for s in k.settings},
        } for k in KINDS.values()},
    }


def rego_module() -> str:
    """``policies/lib/providers.rego``: the data above as a Rego module (a test keeps the file equal)."""
    return generated_rego_module(package="autoclusters.lib.providers", rule="providers",
                                 title="Repair provider types", source="autoclusters/deploy/providers.py",
                                 test="tests/unit/rego/test_policy_data_provider_parity.py", data=rego_data())


if __name__ == "__main__":
    print(rego_module(), end="")

