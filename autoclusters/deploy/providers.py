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

Everything else derives from ``KINDS``: the CRD schema (``crds.py``), the strict parser
(``parse_provider_choice``, used by the stack config, the Pulumi components and the
controller), the Rego data of the pool policy (``rego_module``, rendered to
``policies/lib/providers.rego``) and the controller's registry of builders (a test
proves its keys equal those of ``KINDS``). ``KINDS`` is open: ``register_provider`` adds a
provider, and the per-action fields (``reset``, ``replace``, any later action) come from the
action table (``autoclusters/providers/actions.py``), so a provider and an action registered
from a test module show in the schema, the parser and the roles
(tests/unit/controller/test_action_plugin.py).
"""

from __future__ import annotations

import enum
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters import api
from autoclusters.api import RepairAction, generated_rego_module
from autoclusters.providers.actions import ACTIONS as ACTION_TABLE


def actions() -> tuple[str, ...]:
    """What a provider may be chosen for: the actions of the table, in its order."""
    return ACTION_TABLE.names()

# The Cluster API versions of Machine the clusterapi provider speaks, the default first:
# v1beta2 is Cluster API's storage version from v1.11 on; older releases serve only v1beta1.
CLUSTERAPI_VERSIONS = ("v1beta2", "v1beta1")
# The redfish provider's BMC credentials (keys username, password; optional ca.crt, PEM), written by
# the operator in the controller's namespace; the controller may read this one Secret only.
REDFISH_SECRET = "autoclusters-redfish"
# The ec2 provider's AWS keys when a pool says credentials: secret (keys aws_access_key_id,
# aws_secret_access_key; optional aws_session_token), in the controller's namespace; by default it
# uses the pod's identity (boto3's chain: IRSA, EKS Pod Identity) and reads no Secret.
EC2_SECRET = "autoclusters-ec2"
# How the ec2 provider resets an instance: RebootInstances, or StopInstances then StartInstances
# (a full power cycle: the instance may move to another host, its instance store is lost).
EC2_MODES = ("reboot", "stopStart")
EC2_CREDENTIALS = ("podIdentity", "secret")


class ProviderType(enum.StrEnum):
    """The built-in providers, for code that names one; ``KINDS`` holds every registered provider."""

    SIMULATED = "simulated"
    COMMAND = "command"
    CLUSTERAPI = "clusterapi"
    HOST_REBOOT = "hostReboot"
    KARPENTER = "karpenter"
    REDFISH = "redfish"
    EC2 = "ec2"


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
    # the operator's allow-list the value must be an entry of (deploy/allow_lists.py: "commands",
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
class ProviderKind:
    type: str  # a ProviderType member for a built-in provider
    actions: tuple[str, ...]
    description: str
    settings: tuple[Setting, ...] = ()
    rbac: tuple[Rule, ...] = ()  # beyond the controller's own (nodes get/list/watch/patch, pods, events)
    local_only: bool = False  # its rights are granted on a local (kwok) cluster only

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", str(self.type))  # a plain string (YAML, JSON, Rego)
        object.__setattr__(self, "actions", tuple(str(a) for a in self.actions))

    def setting(self, name: str) -> Setting | None:
        return next((s for s in self.settings if s.name == name), None)


_RESET_AND_REPLACE = (RepairAction.RESET.value, RepairAction.REPLACE.value)
KINDS: dict[str, ProviderKind] = {k.type: k for k in (
    ProviderKind(ProviderType.SIMULATED, _RESET_AND_REPLACE,
                 "kwok nodes of the local simulator only: reset = NotReady then Ready with a new boot id, "
                 "replace = a new node joins the pool. Refuses any node kwok does not manage.",
                 (Setting("resetSeconds", "integer", "How long a reset takes (default: the controller's "
                          "--sim-reset-seconds).", minimum=0),
                  Setting("replaceSeconds", "integer", "How long a replacement takes (default: the controller's "
                          "--sim-replace-seconds).", minimum=0)),
                 (Rule("", "nodes", ("create", "delete")), Rule("", "nodes/status", ("patch",))), local_only=True),
    ProviderKind(ProviderType.COMMAND, _RESET_AND_REPLACE,
                 "Runs an operator's script in the controller's container: ARGV + ACTION NODE; exit 0 = done.",
                 (Setting("command", "strings", "The program and its first arguments; an entry of the allow-list "
                          "allowLists.commands.", required=True, allow_list="commands"),
                  Setting("timeoutSeconds", "integer", "The script fails after this long.", minimum=1,
                          default=900))),
    ProviderKind(ProviderType.CLUSTERAPI, _RESET_AND_REPLACE,
                 "Cluster API: replace deletes the node's Machine; reset sets its remediation annotation.",
                 (Setting("version", "enum", "The Cluster API version of the Machine objects (the other "
                          "one when the cluster does not serve it).",
                          default=CLUSTERAPI_VERSIONS[0], values=tuple(sorted(CLUSTERAPI_VERSIONS))),),
                 (Rule("cluster.x-k8s.io", "machines", ("get", "patch", "delete")),)),
    ProviderKind(ProviderType.HOST_REBOOT, (RepairAction.RESET.value,),
                 "Reboots the node's host with a short-lived privileged Job pinned to the node; done when the "
                 "node reports a new boot id and is Ready.",
                 (Setting("image", "string", "Image of the reboot Job (needs nsenter; the autoclusters image "
                          "by default); another must be an entry of the allow-list allowLists.images.",
                          allow_list="images"),
                  Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
                          "new boot id this long after the Job started.", minimum=1, default=600)),
                 (Rule("batch", "jobs", ("get", "create", "delete"), namespaced=True),)),
    ProviderKind(ProviderType.KARPENTER, (RepairAction.REPLACE.value,),
                 "Karpenter: replace deletes the node's NodeClaim after the drain; done when a new Ready node of "
                 "the same NodePool (with the pool's label) is matched to the replacement.",
                 (Setting("timeoutSeconds", "integer", "The replacement fails when no new Ready node of the "
                          "NodePool is matched this long after the operation started (Karpenter launches "
                          "nodes only for Pending pods).", minimum=1, default=900),),
                 (Rule("karpenter.sh", "nodeclaims", ("get", "list", "patch", "delete")),)),
    ProviderKind(ProviderType.REDFISH, (RepairAction.RESET.value,),
                 "Power-cycles the node's system through its BMC (Redfish ComputerSystem.Reset); the system's "
                 f"URL is the node's annotation; credentials in the Secret {REDFISH_SECRET} of the controller's "
                 "namespace; done when the node reports a new boot id and is Ready.",
                 (Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
                          "new boot id this long after the operation started.", minimum=1, default=600),
                  Setting("requestTimeoutSeconds", "integer", "How long one request to the BMC may take "
                          "(connect and answer).", minimum=1, default=30),
                  Setting("powerOnAfterSeconds", "integer", "A system still powered off this long after the "
                          "reset is powered on (ResetType On); still off as long again, the reset fails.",
                          minimum=1, default=60),
                  Setting("insecureSkipTLSVerify", "boolean", "Do not verify the BMC's certificate (by default "
                          f"it is verified against ca.crt of the Secret {REDFISH_SECRET}, else the system's "
                          "trust store).", default=False)),
                 (Rule("", "secrets", ("get",), namespaced=True, names=(REDFISH_SECRET,)),)),
    ProviderKind(ProviderType.EC2, (RepairAction.RESET.value,),
                 "Reboots (or stops and starts) the EC2 instance of the node's spec.providerID "
                 "(aws:///ZONE/INSTANCE-ID) through the EC2 API; done when the node reports a new boot id and "
                 "is Ready.",
                 (Setting("mode", "enum", "reboot: RebootInstances; stopStart: StopInstances, then StartInstances "
                          "once it is stopped (a full power cycle; the instance store is lost).",
                          default=EC2_MODES[0], values=EC2_MODES),
                  Setting("region", "string", "The instance's region (by default the region of the zone in the "
                          "node's providerID)."),
                  Setting("credentials", "enum", "podIdentity: the controller pod's identity (boto3's default "
                          f"chain: IRSA, EKS Pod Identity); secret: the keys in the Secret {EC2_SECRET} of the "
                          "controller's namespace.", default=EC2_CREDENTIALS[0], values=EC2_CREDENTIALS),
                  Setting("timeoutSeconds", "integer", "The reset fails when the node is not back Ready with a "
                          "new boot id this long after the operation started.", minimum=1, default=900),
                  Setting("requestTimeoutSeconds", "integer", "How long one request to the EC2 API may take "
                          "(connect and answer).", minimum=1, default=30)),
                 (Rule("", "secrets", ("get",), namespaced=True, names=(EC2_SECRET,)),)),
)}


def register_provider(kind: ProviderKind) -> ProviderKind:
    """Adds a provider (its builder goes in ``providers/registry.py``); its actions must be in the action table."""
    unknown = [a for a in kind.actions if a not in ACTION_TABLE]
    if unknown:
        raise ValueError(f"provider {kind.type!r} names actions that are not registered: {', '.join(unknown)}")
    if kind.type in KINDS and KINDS[kind.type] != kind:
        raise ValueError(f"provider {kind.type!r} is registered already")
    KINDS[kind.type] = kind
    return kind


def granted_providers(local: bool) -> tuple[str, ...]:
    """The providers whose rights an installation's controller gets: every one but those whose
    rights only a local (kwok) cluster needs (the simulated one's node create/delete and
    nodes/status patch; its provider refuses every node kwok does not manage)."""
    return tuple(t for t, k in KINDS.items() if local or not k.local_only)


@dataclass(frozen=True)
class ProviderSpec:
    """One provider and its checked settings (camelCase, defaults filled in)."""

    type: str  # a key of KINDS
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", str(self.type))

    def to_dict(self) -> dict[str, Any]:
        return {"type": str(self.type), str(self.type): dict(self.settings)}

    def key(self) -> str:
        """The spec as a string (a cache key); computed once: the controller asks on every reconcile."""
        key = self.__dict__.get("_key")
        if key is None:
            key = json.dumps(self.to_dict(), sort_keys=True)
            object.__setattr__(self, "_key", key)  # frozen: set once, equality still compares the fields
        return str(key)


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
                                 test="tests/unit/policy/test_provider_parity.py", data=rego_data())


if __name__ == "__main__":
    print(rego_module(), end="")


def host_reboot_argv(text: str) -> tuple[str, ...]:
    """The host reboot command (``api.HOST_REBOOT_COMMAND``'s form: shell words) as argv; raises
    ValueError naming what is wrong. It runs inside the host's namespaces, so its program must
    exist on the node's OS (docs/operations.md, "hostReboot on every node OS")."""
    if not isinstance(text, str):  # shlex.split(None) would read standard input
        raise ValueError(f"the host reboot command must be a string of shell words, got {text!r}")
    try:
        argv = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"the host reboot command {text!r} is not valid shell words: {e}") from None
    if not argv:
        raise ValueError("the host reboot command is empty")
    return argv


# api.HOST_REBOOT_COMMAND as argv: the default of every holder of the host command (the provider,
# its build context, the reconciler's settings), so none needs an "empty means default" sentinel
DEFAULT_HOST_REBOOT_ARGV = host_reboot_argv(api.HOST_REBOOT_COMMAND)
