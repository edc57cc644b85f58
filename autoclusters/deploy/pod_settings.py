"""Where the stack's pods run and what they carry: the settings a platform team sets per
component (tolerations, node selector, affinity, resources, priority class, extra env, pod and
service-account annotations) and the image pull secrets, declared once in ``SETTINGS`` (issue 29
item 3). The stack configuration reads them (``pods.<component>.<key>``, ``imagePullSecrets``),
``customize`` applies them to the objects the builders make, for the Pulumi components and
``manifests/`` alike, and docs/deploy.md's table is ``docs_table()``.

Each value is checked when the stack configuration is read, with a message that names the key;
a value that would overwrite what a part needs (its own env variables, its tolerations) is
refused rather than silently merged.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoclusters.deploy import CONTROLLER_SERVICE_ACCOUNT, DETECTOR_SERVICE_ACCOUNT, WEBHOOK_SERVICE_ACCOUNT
from autoclusters.deploy.workloads import CONTROLLER, DETECTOR, WEBHOOK

# the stack's key of each component → its pods' app.kubernetes.io/name and its service account
COMPONENTS: dict[str, tuple[str, str]] = {
    "controller": (CONTROLLER, CONTROLLER_SERVICE_ACCOUNT),
    "webhook": (WEBHOOK, WEBHOOK_SERVICE_ACCOUNT),
    "detector": (DETECTOR, DETECTOR_SERVICE_ACCOUNT),
}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_AFFINITY_KEYS = {"nodeAffinity", "podAffinity", "podAntiAffinity"}
_RESOURCE_KEYS = {"requests", "limits"}
PULL_SECRETS_FLAG = "--image-pull-secrets"  # the controller's flag (ControllerConfig.image_pull_secrets)


class PodSettingsError(ValueError):
    """A pod setting that cannot be applied; the message names the key."""


def _string_map(where: str, value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and k and isinstance(v, str)
                                              for k, v in value.items()):
        raise PodSettingsError(f"{where} must be a map of strings to strings, got {value!r}")


def _objects(where: str, value: Any, keys: set[str]) -> None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PodSettingsError(f"{where} must be a list of objects, got {value!r}")
    for i, v in enumerate(value):
        unknown = sorted(set(v) - keys)
        if unknown:
            raise PodSettingsError(f"{where}[{i}] has unknown keys {unknown} (known: {sorted(keys)})")


def _object(where: str, value: Any, keys: set[str]) -> None:
    if not isinstance(value, dict):
        raise PodSettingsError(f"{where} must be an object, got {value!r}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise PodSettingsError(f"{where} has unknown keys {unknown} (known: {sorted(keys)})")


def _check_tolerations(where: str, value: Any) -> None:
    _objects(where, value, _TOLERATION_KEYS)


def _check_node_selector(where: str, value: Any) -> None:
    _string_map(where, value)


def _check_affinity(where: str, value: Any) -> None:
    _object(where, value, _AFFINITY_KEYS)


def _check_resources(where: str, value: Any) -> None:
    _object(where, value, _RESOURCE_KEYS)
    for part, quantities in value.items():
        if not isinstance(quantities, dict) or not all(isinstance(k, str) and isinstance(q, (str, int))
                                                       and not isinstance(q, bool) for k, q in quantities.items()):
            raise PodSettingsError(f"{where}.{part} must map resource names to quantities, got {quantities!r}")


def _check_priority_class(where: str, value: Any) -> None:
    if not isinstance(value, str) or not _DNS_SUBDOMAIN.match(value):
        raise PodSettingsError(f"{where} must be a PriorityClass name (a DNS subdomain), got {value!r}")


def _check_env(where: str, value: Any) -> None:
    _objects(where, value, {"name", "value"})
    for i, v in enumerate(value):
        if not isinstance(v.get("name"), str) or not _ENV_NAME.match(v["name"]) \
                or not isinstance(v.get("value", ""), str):
            raise PodSettingsError(f"{where}[{i}] must be {{name: <env name>, value: <string>}}, got {v!r}")


def _main_container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["containers"][0]


def _apply_tolerations(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    pod["tolerations"] = [*pod.get("tolerations", []), *value]


def _apply_node_selector(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    pod["nodeSelector"] = {**pod.get("nodeSelector", {}), **value}


def _apply_affinity(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    # a part's required node affinity is where it must run (the detector's: the GPU nodes):
    # kept, and not replaceable; the rest of its affinity (spreading replicas) is the user's
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required and "nodeAffinity" in value:
        raise PodSettingsError("affinity.nodeAffinity would replace the node affinity that selects where this part "
                               "must run (the detector's GPU nodes); narrow it with nodeSelector instead")
    pod["affinity"] = {**value, **({"nodeAffinity": pod["affinity"]["nodeAffinity"]} if required else {})}


def _apply_resources(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    _main_container(pod)["resources"] = value


def _apply_priority_class(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    pod["priorityClassName"] = value


def _apply_env(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    container = _main_container(pod)
    ours = {e["name"] for e in container.get("env", [])}
    clash = sorted(ours & {e["name"] for e in value})
    if clash:
        raise PodSettingsError(f"env {clash} is set by autoclusters itself; use the setting that controls it")
    # an entry as given: without a value it is the empty string to Kubernetes, and Helm writes it so
    container["env"] = [*container.get("env", []), *({"name": e["name"], **({"value": e["value"]} if "value" in e
                                                                            else {})} for e in value)]


def _apply_pod_annotations(pod: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    clash = sorted(set(meta.get("annotations", {})) & set(value))
    if clash:
        raise PodSettingsError(f"podAnnotations {clash} are set by autoclusters itself (monitoring)")
    meta["annotations"] = {**meta.get("annotations", {}), **value}


def _apply_sa_annotations(account: dict[str, Any], meta: dict[str, Any], value: Any) -> None:
    meta["annotations"] = {**meta.get("annotations", {}), **value}


@dataclass(frozen=True)
class Setting:
    key: str  # the key under pods.<component> (the stack's, and a Helm value's)
    shape: str  # for the docs: what the value is
    doc: str
    check: Callable[[str, Any], None]
    # (the object's spec, its metadata, value): applies it; the object is the part's pod template
    # (spec and metadata) or, with ``on_service_account``, its ServiceAccount (the object itself)
    apply: Callable[[dict[str, Any], dict[str, Any], Any], None]
    on_service_account: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("tolerations", "list of tolerations", "added to the part's own (the detector's tolerate the GPU and "
            "maintenance taints already)", _check_tolerations, _apply_tolerations),
    Setting("nodeSelector", "map of labels", "merged into the part's own (the detector runs on GPU nodes only)",
            _check_node_selector, _apply_node_selector),
    Setting("affinity", "affinity", "replaces the part's own (the controller's and the webhook's spread their "
            "replicas over nodes); the detector keeps its node affinity (the GPU nodes), so a nodeAffinity there "
            "is refused", _check_affinity, _apply_affinity),
    Setting("resources", "requests / limits", "replaces the main container's", _check_resources, _apply_resources),
    Setting("priorityClassName", "PriorityClass name", "e.g. system-node-critical for the detector",
            _check_priority_class, _apply_priority_class),
    Setting("env", "list of {name, value}", "added to the main container's; a variable autoclusters sets is "
            "refused", _check_env, _apply_env),
    Setting("podAnnotations", "map of strings", "added to the pods' (the monitoring annotations are ours)",
            _string_map, _apply_pod_annotations),
    Setting("serviceAccountAnnotations", "map of strings", "on the part's service account: cloud identity "
            "(IRSA's eks.amazonaws.com/role-arn, GKE's iam.gke.io/gcp-service-account)", _string_map,
            _apply_sa_annotations, on_service_account=True),
)
_BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class PodSettings:
    """The stack's pod settings: per component key (``COMPONENTS``), setting key → value."""

    components: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.components, Mapping):
            raise PodSettingsError(f"pods must be an object keyed by {', '.join(COMPONENTS)}, "
                                   f"got {self.components!r}")
        for component, values in self.components.items():
            if component not in COMPONENTS:
                raise PodSettingsError(f"pods.{component}: unknown part (known: {', '.join(COMPONENTS)})")
            if not isinstance(values, Mapping):
                raise PodSettingsError(f"pods.{component} must be an object, got {values!r}")
            for key, value in values.items():
                setting = _BY_KEY.get(key)
                if setting is None:
                    raise PodSettingsError(f"pods.{component}.{key}: unknown setting "
                                           f"(known: {', '.join(_BY_KEY)})")
                setting.check(f"pods.{component}.{key}", value)
        secrets = self.image_pull_secrets
        if isinstance(secrets, str) or not all(isinstance(s, str) and _DNS_SUBDOMAIN.match(s) for s in secrets):
            raise PodSettingsError(f"imagePullSecrets must be a list of Secret names, got {secrets!r}")
        object.__setattr__(self, "image_pull_secrets", tuple(secrets))
        object.__setattr__(self, "components", {c: dict(v) for c, v in self.components.items()})

    def customize(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with the settings of its component applied (a copy); an object of no
        component (a CRD, a role) comes back as it is."""
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        if kind in ("Deployment", "DaemonSet"):
            component = next((c for c, (label, _sa) in COMPONENTS.items()
                              if (meta.get("labels") or {}).get("app.kubernetes.io/name") == label), None)
            if component is None or not (self.components.get(component) or self.image_pull_secrets):
                return obj
            out = copy.deepcopy(obj)
            template = out["spec"]["template"]
            pod, pod_meta = template["spec"], template.setdefault("metadata", {})
            for setting, value in self._settings(component, on_service_account=False):
                setting.apply(pod, pod_meta, value)
            if self.image_pull_secrets:
                pod["imagePullSecrets"] = [{"name": s} for s in self.image_pull_secrets]
                if component == "controller":  # and its Jobs (the reboot Job runs its image)
                    _main_container(pod)["args"] = [*_main_container(pod)["args"], PULL_SECRETS_FLAG,
                                                    ",".join(self.image_pull_secrets)]
            return out
        if kind == "ServiceAccount":
            component = next((c for c, (_label, sa) in COMPONENTS.items() if meta.get("name") == sa), None)
            settings = self._settings(component, on_service_account=True) if component else []
            if not settings:
                return obj
            out = copy.deepcopy(obj)
            for setting, value in settings:
                setting.apply(out, out["metadata"], value)
            return out
        return obj

    def _settings(self, component: str, *, on_service_account: bool) -> list[tuple[Setting, Any]]:
        """The settings given for ``component`` that dress its pods, or its service account. An
        empty map or list is a setting left out (Helm's unset value is ``{}``): the part keeps its own."""
        return [(_BY_KEY[key], value) for key, value in self.components.get(component, {}).items()
                if _BY_KEY[key].on_service_account == on_service_account and value not in ({}, [])]


def docs_table() -> str:
    """docs/deploy.md's table of the pod settings."""
    lines = ["| key (under `pods.<part>`, part one of " + ", ".join(f"`{c}`" for c in COMPONENTS) + ") | value | "
             "what it does |", "|---|---|---|"]
    lines += [f"| `{s.key}` | {s.shape} | {s.doc} |" for s in SETTINGS]
    lines.append("| `imagePullSecrets` (top level) | list of Secret names | on every pod of ours, the reboot "
                 "Jobs' included (the Secrets live in the stack's namespace) |")
    return "\n".join(lines)


DOCS_MARKER = "<!-- pod-settings-table"


if __name__ == "__main__":  # make manifests: python -m autoclusters.deploy.pod_settings docs/deploy.md
    import sys

    from autoclusters import doc_tables

    doc_tables.rewrite(sys.argv[1], DOCS_MARKER, docs_table())
