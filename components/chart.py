"""``charts/autoclusters``: the Helm chart, generated from the same builders as ``manifests/``
(``autoclusters.deploy.stack.stack_objects``), so the chart, the YAML and Pulumi cannot drift
(issue 29 item 2).

The "sentinel render": the objects are rendered once with the defaults and once per value key
with that key set to a distinctive sentinel that passes the Python validation. Where the two
renders differ is where the template reads the value: a scalar that holds the sentinel becomes
``{{ ... }}`` (a string with the value inside: ``print``), keys or list items that only the
sentinel render has are added under a condition on the key (a list value's items by ``range``,
a map value's entries merged by ``range``), and a subtree equal to the value replaces the
default's (``if`` / ``else``). A difference none of those explain raises ``Unmappable``: such a
key stays out of the values (``LEFT_OUT`` says which and why); no template is written by hand.

"Variants": a setting of a few choices that changes structure (``kernelLogSource``,
``nvml.enabled``, ``monitoring.prometheusOperator``: flags, mounts, whole objects) is a value
too (``ValueKey.choices``). The whole sentinel render runs once per combination of their
choices, which gives each object a template text per combination (none where the combination
does not have the object); ``merged_template`` writes an object whose text is the same in all
of them as it is, and otherwise each group of combinations with the same text under a condition
on the variant keys the text depends on. A value key whose default is a case of its own
(``ValueKey.split``: ``nvml.hostRoot`` "/", through which the journal source reads the host's
logs) is split the same way where its sentinel render is unmappable: its default as written,
and every other value from a render with another one.

The values are the stack configuration's own keys (``autoclusters.deploy.stack_config``), so
``helm --set K=V`` renders what ``components.render --config`` renders for ``K: V``
(tests/integration/test_helm_chart.py proves it for every key).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from autoclusters import __version__, api
from autoclusters.deploy.controller_flags import TUNABLES
from autoclusters.deploy.nvml_reach import DEFAULT_HOST_ROOT, DEFAULT_SEARCH
from autoclusters.deploy.pod_settings import COMPONENTS, SETTINGS
from autoclusters.deploy.stack import stack_objects
from autoclusters.deploy.stack_config import StackConfig, stack_config_from_dict
from autoclusters.names import QUALIFIED_PATTERN
from autoclusters.pools import default_pool
from components.manifest_objects import GITOPS_PROVIDERS, HEADER, file_for, manifest
from components.pools_chart import spec_schema

Path = tuple[Any, ...]  # a path into an object: dict keys and list indexes
_DEFAULTS = StackConfig()
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_NO_SPACE = r"^\S*$"
_URL = r"^https?://\S+$"


class Unmappable(ValueError):
    """A difference between the default and a sentinel render that no template form explains."""


@dataclass(frozen=True)
class ValueKey:
    """One leaf of the values: its path (the stack configuration's), its JSON schema, a
    sentinel maker (a distinctive valid value from a token), and its default in values.yaml
    (``None``: absent, the objects carry nothing of it)."""

    path: tuple[str, ...]
    schema: dict[str, Any]
    sentinel: Callable[[str], Any]
    doc: str
    default: Any = None
    # a variant: every value it takes (the default first); the objects are rendered with each
    choices: tuple[Any, ...] = ()
    # its default is a case of its own: where another value changes more than the value in place
    # (a sentinel render that is unmappable), the template is split on whether the key holds it
    split: bool = False
    # the variant values without which the key changes nothing (its objects come with them)
    needs: tuple[tuple[tuple[str, ...], Any], ...] = ()
    # how a list value is written into one string ({ref}: the value), as the stack writes it
    joined: str = '(join "," {ref})'

    @property
    def dotted(self) -> str:
        return ".".join(self.path)


def _variant(path: tuple[str, ...], default: Any, choices: tuple[Any, ...], doc: str) -> ValueKey:
    """A variant key: the stack's default first, then its other choices."""
    ordered = (default, *(c for c in choices if c != default))
    schema = {"type": "boolean"} if all(isinstance(c, bool) for c in ordered) else \
        {"type": "string", "enum": list(ordered)}
    return ValueKey(path, schema, lambda t: ordered[-1], doc, default, ordered)


def _token(path: tuple[str, ...], mark: str = "zzhelm") -> str:
    return mark + re.sub(r"[^a-z0-9]", "", "".join(path).lower()) + "zz"


# the sentinels of the pod settings (deploy.pod_settings.SETTINGS), each valid for its check
_POD_SENTINELS: dict[str, Callable[[str], Any]] = {
    "tolerations": lambda t: [{"key": t, "operator": "Exists"}],
    "nodeSelector": lambda t: {t: t + "v"},
    "affinity": lambda t: {"podAffinity": {t: t + "v"}},
    "resources": lambda t: {"limits": {t: t + "v"}},
    "priorityClassName": lambda t: t,
    "env": lambda t: [{"name": t, "value": t + "v"}],
    "podAnnotations": lambda t: {t: t + "v"},
    "serviceAccountAnnotations": lambda t: {t: t + "v"},
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_POD_SCHEMAS: dict[str, dict[str, Any]] = {
    "tolerations": {"type": "array", "items": {"type": "object", "additionalProperties": False, "properties": {
        "key": {"type": "string"}, "operator": {"type": "string"}, "value": {"type": "string"},
        "effect": {"type": "string"}, "tolerationSeconds": {"type": "integer"}}}},
    "nodeSelector": {**_STRING_MAP},
    "affinity": {"type": "object", "additionalProperties": False, "properties": {
        k: {"type": "object"} for k in ("nodeAffinity", "podAffinity", "podAntiAffinity")}},
    "resources": {"type": "object", "additionalProperties": False, "properties": {
        k: {"type": "object", "additionalProperties": {"type": ["string", "integer"]}}
        for k in ("requests", "limits")}},
    "priorityClassName": {"type": "string", "pattern": _DNS_SUBDOMAIN},
    "env": {"type": "array", "items": {"type": "object", "additionalProperties": False, "required": ["name"],
                                       "properties": {"name": {"type": "string",
                                                               "pattern": r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"},
                                                      "value": {"type": "string"}}}},
    "podAnnotations": {**_STRING_MAP},
    "serviceAccountAnnotations": {**_STRING_MAP},
}


def _tunable_schema(kind: type, minimum: float | None) -> dict[str, Any]:
    if kind is str:
        return {"type": "string", "pattern": _URL}
    return {"type": "integer" if kind is int else "number", **({"minimum": minimum} if minimum is not None else {})}


def _tunable_sentinel(kind: type) -> Callable[[str], Any]:
    if kind is str:
        return lambda t: f"https://{t}.example/"
    return lambda t: 97531  # a number the renders write as it is (":g" keeps 6 digits)


def value_keys() -> tuple[ValueKey, ...]:
    """Every leaf of the values, in the order the builders add what they set (so that two keys
    that add to the same list add in the Python order)."""
    keys = [
        ValueKey(("image",), {"type": "string", "pattern": r"^\S+$"}, lambda t: t,
                 "the autoclusters image (controller, webhook, detector, reboot Jobs)", _DEFAULTS.image),
        ValueKey(("opaImage",), {"type": "string", "pattern": r"^\S+$"}, lambda t: t,
                 "OPA's image (the webhook's sidecar)", _DEFAULTS.opa_image),
    ]
    keys += [ValueKey(("controller", name), _tunable_schema(t.kind, t.minimum), _tunable_sentinel(t.kind),
                      f"{t.doc} ({t.flag})") for name, t in TUNABLES.items()]
    # before the detector's keys: the builder adds its flag before theirs
    keys.append(ValueKey(("detectorConditionCodes",), {"type": "array", "items": {
        "type": "string", "pattern": api.REPAIR_CODE_PATTERN}}, lambda t: ["gpu:13"],
        "<class>:<code> keys whose warnings raise the fault condition too (the detector's --condition-codes)",
        joined='(join "," (sortAlpha (uniq {ref})))'))  # the stack sorts and drops repeats
    keys += [
        _variant(("kernelLogSource",), _DEFAULTS.kernel_log_source.value,
                 tuple(s.value for s in api.DAEMONSET_KERNEL_LOG_SOURCES),
                 "where the detector reads the kernel log: kmsg (/dev/kmsg, mounted from the host) or journal "
                 "(the host's journal, its kernel entries)"),
        ValueKey(("detector", "dcgmHost"), {"type": "string", "pattern": _NO_SPACE, "minLength": 1},
                 lambda t: t + ":5555", "the DCGM hostengine the detector asks (--dcgm-host)"),
        ValueKey(("detector", "dcgmExporterUrl"), {"type": "string", "pattern": _URL},
                 lambda t: f"http://{t}:9400/metrics", "the node's dcgm-exporter page (--dcgm-exporter-url)"),
        ValueKey(("detector", "windowSeconds"), {"type": "number", "minimum": 0}, lambda t: 97531,
                 "how long a fault lasts before its condition is raised (--window)"),
        _variant(("nvml", "enabled"), _DEFAULTS.nvml.enabled, (True, False),
                 "false: the detector runs without NVML (--no-nvml), without the host mount"),
        ValueKey(("nvml", "search"), {"type": "array", "minItems": 1, "items": {
            "type": "string", "pattern": r"^(loader|/[^,]*)$"}}, lambda t: ["/" + t],
            "where the detector looks for libnvidia-ml.so.1, in order", list(DEFAULT_SEARCH)),
        ValueKey(("nvml", "hostRoot"), {"type": "string", "pattern": r"^/\S*$"}, lambda t: "/" + t,
                 "the host directory mounted read-only at /host", DEFAULT_HOST_ROOT, split=True),
        ValueKey(("nvml", "runtimeClassName"), {"type": "string", "pattern": _NO_SPACE, "minLength": 1}, lambda t: t,
                 "the detector's runtime class (e.g. nvidia: the runtime injects NVML)"),
    ]
    keys += [ValueKey(("pods", part, s.key), _POD_SCHEMAS[s.key], _POD_SENTINELS[s.key], f"{s.shape}: {s.doc}")
             for part in COMPONENTS for s in SETTINGS]
    keys.append(ValueKey(("eventSource",), {"type": "string", "pattern": QUALIFIED_PATTERN},
                         lambda t: t, "the controller's events' source.component and reportingComponent "
                         "(nodepool-service: the reference system's; unset: autoclusters-controller)"))
    keys.append(ValueKey(("defaultPool",), spec_schema(without=default_pool.NOT_ALLOWED),
                         lambda t: {"consentMode": "off", "drain": {"resetDeadlineSeconds": 97531}},
                         "the cluster default policy: a GpuNodePool spec for the nodes whose pool label names no "
                         "pool (unset: consent mode auto, the pool defaults, no provider)"))
    keys.append(ValueKey(("imagePullSecrets",), {"type": "array", "items": {"type": "string",
                                                                            "pattern": _DNS_SUBDOMAIN}},
                         lambda t: [t], "Secret names for every pod of ours, the reboot Jobs' included", []))
    operator = ("monitoring", "prometheusOperator")
    keys += [
        _variant(operator, _DEFAULTS.monitoring.prometheus_operator, (False, True),
                 "true: a PodMonitor each for the controller, the detector and the webhook, and a PrometheusRule "
                 "of the alerts (the cluster needs the Prometheus Operator's CRDs)"),
        ValueKey(("monitoring", "labels"), dict(_STRING_MAP), lambda t: {t: t + "v"},
                 "labels on the PodMonitors and the PrometheusRule (monitoring.prometheusOperator), for an operator "
                 "that selects them by label (kube-prometheus-stack: release: <its release>)",
                 needs=((operator, True),)),
    ]
    return tuple(keys)


def variants(keys: tuple[ValueKey, ...]) -> tuple[ValueKey, ...]:
    return tuple(k for k in keys if k.choices)


# stack settings the chart does not carry as values, and why
LEFT_OUT: dict[str, str] = {
    "allowLists": "written as JSON inside a ConfigMap, flags and a CEL list: not a value in place",
    "pools": "custom resources of a CRD the chart creates, refused until its webhook serves: the pools chart "
             "(charts/autoclusters-pools, components/pools_chart.py)",
    "domain, conditionPrefix, namespace": "render-time: a brand renders its own chart",
    "controllerShards": "adds or removes objects by a number, not a choice",
    "monitoring.approvalWaitAlertSeconds": "spoken in the alert's text ('6 hours'): not the value as given",
    "controllerProviders": "render-time: the chart grants every provider but the simulated, as manifests/ does",
    "local, webhookUrl": "the local kwok cluster's settings, not a cluster's install",
    "hostRebootCommand": "split into its argv inside the reboot Job policy's CEL: not a value in place",
}


def base_config(extra: dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stack configuration the chart renders (components.render's, without the example pools):
    the render-time ``settings`` (those that are not values), with ``extra`` merged in."""
    return _merged({"controllerProviders": GITOPS_PROVIDERS, **(settings or {})}, extra or {})


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render_time_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What of a stack configuration a chart is rendered with: every setting but the values'
    keys (those are set at ``helm install``), e.g. ``hostRebootCommand``, ``domain``,
    ``nvml.enabled``; and no ``pools``, which are applied once the install's webhook serves
    (docs/deploy.md, "With Helm"). Maps left empty go too."""
    values = {k.path for k in value_keys()}

    def strip(data: dict[str, Any], prefix: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in data.items():
            path = (*prefix, k)
            if path in values or path == ("pools",):
                continue
            if isinstance(v, dict) and any(p[:len(path)] == path for p in values):
                v = strip(v, path)
                if not v:
                    continue
            out[k] = v
        return out

    return strip(config, ())


def nest(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        out = {part: out}
    return out


def objects(extra: dict[str, Any] | None = None, settings: dict[str, Any] | None = None
            ) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(kind, namespace, name) → object (as manifests/ holds it) of the chart's configuration."""
    return {ident: manifest(obj) for ident, obj in _built(extra, settings).items()}


def _built(extra: dict[str, Any] | None, settings: dict[str, Any] | None) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The same objects as the builders return them (``manifest`` only orders their keys)."""
    out = {}
    for obj in stack_objects(stack_config_from_dict(base_config(extra, settings))):
        if file_for(obj) is not None:
            out[(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
    return out


# --- the template tree -------------------------------------------------------------------------

@dataclass(frozen=True)
class Expr:
    """A scalar written by a template action (its text yields JSON)."""

    text: str


@dataclass(frozen=True)
class Ctl:
    """A control line (``if``, ``range``, ``end``) among a map's entries or a list's items."""

    text: str


@dataclass
class TDict:
    entries: list[tuple[str | Expr, Any] | Ctl]


@dataclass
class TList:
    items: list[Any]


@dataclass(frozen=True)
class _Edit:
    key: ValueKey
    kind: str  # "scalar", "replace", "keys" (entries added to a map), "items" (items added to a list)
    node: Any = None  # scalar / replace: the template node; keys: a TDict's entries; items: a TList's items
    index: int = 0  # items: where in the default list


def _vref(key: ValueKey) -> str:
    return "(index $.Values " + " ".join(json.dumps(p) for p in key.path) + ")"


def _condition(key: ValueKey) -> str:
    if key.schema.get("type") in ("integer", "number"):
        parent = "$.Values" if len(key.path) == 1 else \
            "(index $.Values " + " ".join(json.dumps(p) for p in key.path[:-1]) + ")"
        return f"hasKey {parent} {json.dumps(key.path[-1])}"
    return _vref(key)


class _Converter:
    """Turns a subtree of the sentinel render into template nodes: where the sentinel's
    value, item or entry stands, the template reads the value."""

    def __init__(self, key: ValueKey, token: str, value: Any) -> None:
        self.key, self.token, self.value = key, token, value
        self.ref = _vref(key)

    def tokens(self) -> list[tuple[str, str]]:
        """(text in a render, the expression that writes it) of the value."""
        v = self.value
        if isinstance(v, list) and len(v) == 1 and isinstance(v[0], str):
            return [(v[0], self.key.joined.format(ref=self.ref))]
        if isinstance(v, str):
            return [(v, self.ref)]
        if isinstance(v, int | float) and not isinstance(v, bool):
            return [(str(v), f"({self.ref} | toString)")]
        if isinstance(v, dict):  # a map written as JSON inside a string (the default policy's ConfigMap)
            return [(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False), f"(toJson {self.ref})")]
        return []

    def has_token(self, node: Any) -> bool:
        text = json.dumps(node)
        return any(t in text for t, _ in self.tokens()) or self.token in text

    def scalar(self, s: Any, item: str | None = None) -> Any:
        if s == self.value and not isinstance(s, str | list | dict):
            return Expr(f"{{{{ toJson {self.ref} }}}}")
        if not isinstance(s, str):
            if self.has_token(s):
                raise Unmappable(f"{self.key.dotted}: {s!r}")
            return s
        if item is not None and isinstance(self.value, list) and s == self.value[0]:
            return Expr(f"{{{{ toJson {item} }}}}")
        for text, expr in self.tokens():
            if text in s:
                parts = s.split(text)
                args = f" {expr} ".join(json.dumps(p) for p in parts)
                return Expr(f"{{{{ print {args} | toJson }}}}")
        if self.token in s:
            raise Unmappable(f"{self.key.dotted}: the sentinel inside {s!r}")
        return s

    def node(self, n: Any, item: str | None = None) -> Any:
        if n == self.value:
            return Expr(f"{{{{ toJson {self.ref} }}}}")
        if isinstance(n, dict):
            return TDict([(k, self.node(v, item)) for k, v in n.items()])
        if isinstance(n, list):
            return TList(self.items(n, item))
        return self.scalar(n, item)

    def items(self, items: list[Any], item: str | None = None) -> list[Any]:
        """List items of the sentinel render: one item made from a one-item list value's item
        is a ``range`` over the value."""
        v = self.value
        if item is None and isinstance(v, list) and len(v) == 1 and len(items) == 1 and self.has_token(items[0]):
            if items[0] == v[0]:
                return [Ctl(f"{{{{- range $it := {self.ref} }}}}"), Expr("{{ toJson $it }}"), Ctl("{{- end }}")]
            return [Ctl(f"{{{{- range $it := {self.ref} }}}}"), self.node(items[0], "$it"), Ctl("{{- end }}")]
        return [self.node(i, item) for i in items]

    def entries(self, added: dict[str, Any]) -> list[tuple[str | Expr, Any] | Ctl]:
        """Map entries only the sentinel render has: the value's own entries merge by ``range``."""
        v = self.value
        if isinstance(v, dict) and set(added) <= set(v) and all(added[k] == v[k] for k in added):
            return [Ctl(f"{{{{- range $k, $v := {self.ref} }}}}"), (Expr("{{ $k | toJson }}"),
                                                                    Expr("{{ toJson $v }}")), Ctl("{{- end }}")]
        return [(k, self.node(n)) for k, n in added.items()]


def _diff(conv: _Converter, d: Any, s: Any, path: Path) -> Iterator[tuple[Path, _Edit]]:
    key = conv.key
    if d == s:
        return
    if s == conv.value and not isinstance(s, str | int | float):
        yield path, _Edit(key, "replace", Expr(f"{{{{ toJson {conv.ref} }}}}"))
        return
    if isinstance(d, dict) and isinstance(s, dict):
        if set(d) - set(s):
            raise Unmappable(f"{key.dotted}: removes {sorted(set(d) - set(s))} at {path}")
        added = {k: s[k] for k in s if k not in d}
        if added:
            yield path, _Edit(key, "keys", conv.entries(added))
        for k in d:
            yield from _diff(conv, d[k], s[k], (*path, k))
        return
    if isinstance(d, list) and isinstance(s, list):
        if len(d) == len(s):
            for i, (a, b) in enumerate(zip(d, s, strict=True)):
                yield from _diff(conv, a, b, (*path, i))
            return
        p = 0
        while p < len(d) and d[p] == s[p]:
            p += 1
        q = 0
        while q < len(d) - p and d[len(d) - 1 - q] == s[len(s) - 1 - q]:
            q += 1
        if p + q != len(d):
            raise Unmappable(f"{key.dotted}: changes the list at {path}")
        yield path, _Edit(key, "items", conv.items(s[p:len(s) - q]), p)
        return
    if isinstance(d, str | int | float | bool) and isinstance(s, str | int | float | bool):
        node = conv.scalar(s)
        if not isinstance(node, Expr):
            raise Unmappable(f"{key.dotted}: changes {d!r} to {s!r} at {path}")
        yield path, _Edit(key, "scalar", node)
        return
    raise Unmappable(f"{key.dotted}: changes {path} from {d!r} to {s!r}")


def key_edits(key: ValueKey, default: dict[tuple[str, str, str], dict[str, Any]],
              settings: dict[str, Any] | None = None) -> dict[tuple[str, str, str], list[tuple[Path, _Edit]]]:
    """Per object, where ``key``'s sentinel render differs from the default render."""
    token = _token(key.path)
    value = key.sentinel(token)
    sentinel = _built(nest(key.path, value), settings)
    if set(sentinel) != set(default):
        raise Unmappable(f"{key.dotted}: adds or removes objects")
    conv = _Converter(key, token, value)
    out: dict[tuple[str, str, str], list[tuple[Path, _Edit]]] = {}
    for ident, obj in default.items():
        if sentinel[ident] == obj:  # equal maps whatever their keys' order: most objects, and ordering them is slow
            continue
        edits = list(_diff(conv, obj, manifest(sentinel[ident]), ()))
        if edits:
            out[ident] = edits
    return out


def template_tree(obj: Any, edits: list[tuple[Path, _Edit]], path: Path = ()) -> Any:
    """``obj`` (of the default render) with the keys' edits in place."""
    here = [e for p, e in edits if p == path]
    for e in here:
        if e.kind in ("scalar", "replace"):
            # a value the default render holds without the key being set (the detector's
            # priority class) is the default's unless the key is set
            if e.kind == "replace" or e.key.default is None or not isinstance(obj, str | int | float | bool):
                return Expr("{{ if " + _condition(e.key) + " }}" + e.node.text + "{{ else }}"
                            + _escape(json.dumps(obj)) + "{{ end }}")
            return e.node
    if isinstance(obj, dict):
        entries: list[tuple[str | Expr, Any] | Ctl] = [(k, template_tree(v, edits, (*path, k))) for k, v in obj.items()]
        for e in here:
            if e.kind == "keys":
                entries += [Ctl("{{- if " + _condition(e.key) + " }}"), *e.node, Ctl("{{- end }}")]
        return TDict(entries)
    if isinstance(obj, list):
        items: list[Any] = []
        for i in range(len(obj) + 1):
            for e in here:
                if e.kind == "items" and e.index == i:
                    items += [Ctl("{{- if " + _condition(e.key) + " }}"), *e.node, Ctl("{{- end }}")]
            if i < len(obj):
                items.append(template_tree(obj[i], edits, (*path, i)))
        return TList(items)
    return obj


# --- the emitter -------------------------------------------------------------------------------

def _escape(text: str) -> str:
    """Literal text in a template: ``{{`` would open an action."""
    return text.replace("{{", '{{ "{{" }}')


def _scalar(v: Any) -> str:
    if isinstance(v, Expr):
        return v.text
    return _escape(json.dumps(v))


def _key(k: str | Expr) -> str:
    if isinstance(k, Expr):
        return k.text
    return k if _plain(k) else _escape(json.dumps(k))


@functools.cache
def _plain(k: str) -> bool:
    """A key YAML reads back as itself when written bare (a YAML parse per distinct key: it was
    half of the chart's render time before it was cached)."""
    return bool(_PLAIN_KEY.match(k)) and yaml.safe_load(f"{k}: 0") == {k: 0}


def _only_conditional(node: Any) -> bool:
    if isinstance(node, TDict):
        return not node.entries or all(isinstance(e, Ctl) for e in node.entries) or not any(
            not isinstance(e, Ctl) for e in _fixed(node.entries))
    if isinstance(node, TList):
        return not any(not isinstance(i, Ctl) for i in _fixed(node.items))
    return False


def _fixed(items: list[Any]) -> list[Any]:
    """The entries or items outside any condition or range."""
    out, depth = [], 0
    for i in items:
        if isinstance(i, Ctl):
            depth += -1 if i.text.startswith("{{- end") else 1
        elif depth == 0:
            out.append(i)
    return out


def emit(node: Any, indent: int) -> list[str]:
    """The template lines of a map or list at ``indent``."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(node, TDict):
        for e in node.entries:
            if isinstance(e, Ctl):
                lines.append(pad + e.text)
                continue
            k, v = e
            lines += _entry(pad + _key(k) + ":", v, indent)
        return lines
    assert isinstance(node, TList)
    for item in node.items:
        if isinstance(item, Ctl):
            lines.append(pad + item.text)
            continue
        lines += _entry(pad + "-", item, indent)
    return lines


def _entry(head: str, v: Any, indent: int) -> list[str]:
    if isinstance(v, TDict | TList):
        if not (v.entries if isinstance(v, TDict) else v.items):
            return [head + (" {}" if isinstance(v, TDict) else " []")]
        if _only_conditional(v):
            # no fixed entries: an empty literal unless a condition adds some
            conds = [i.text[5:-3].strip() for i in (v.entries if isinstance(v, TDict) else v.items)
                     if isinstance(i, Ctl) and i.text.startswith("{{- if ")]
            empty = "{}" if isinstance(v, TDict) else "[]"
            test = conds[0] if len(conds) == 1 else "or " + " ".join(f"({c})" for c in conds)
            if not conds:  # only ranges: inside the condition that added this entry
                return [head, *emit(v, indent + 2)]
            return [head + " {{ if not (" + test + ") }}" + empty + "{{ end }}", *emit(v, indent + 2)]
        return [head, *emit(v, indent + 2)]
    return [head + " " + _scalar(v)]


# --- the variants -----------------------------------------------------------------------------

Ident = tuple[str, str, str]  # kind, namespace, name


class _AnyOther:
    """The case of a split key (``ValueKey.split``) that stands for every value but its default."""

    def __repr__(self) -> str:
        return "ANY_OTHER"


ANY_OTHER = _AnyOther()
Cases = tuple[ValueKey, tuple[Any, ...]]  # a key the templates branch on, and the cases they tell apart


def value_template(key: ValueKey) -> str:
    """The name of the named template (``templates/_values.tpl``) that writes a branched-on key's
    value as text, or its default where the key is unset (``helm upgrade --reuse-values`` from
    a chart without it)."""
    return "autoclusters.value." + key.dotted


def _case_text(value: Any) -> str:
    return json.dumps(str(value).lower() if isinstance(value, bool) else str(value))


def _in(key: ValueKey, cases: tuple[Any, ...], among: tuple[Any, ...]) -> str:
    """The condition that ``key``'s value is one of the cases ``among``."""
    text = f'(include "{value_template(key)}" $)'
    if ANY_OTHER in among:
        return _all([f"ne {text} {_case_text(c)}" for c in cases if c is not ANY_OTHER and c not in among], "and")
    return _all([f"eq {text} {_case_text(c)}" for c in among], "or")


def _all(terms: list[str], op: str) -> str:
    assert terms
    return terms[0] if len(terms) == 1 else op + " " + " ".join(f"({t})" for t in terms)


def _when(dims: list[Cases], group: list[tuple[Any, ...]]) -> str:
    """The condition of a group of combinations (each a case per key of ``dims``): per key, where
    the group is every combination of its keys' cases; otherwise one term per combination."""
    per_key = [tuple(dict.fromkeys(combo[i] for combo in group)) for i in range(len(dims))]
    if len(group) == len(list(itertools.product(*per_key))):
        return _all([_in(key, cases, among) for (key, cases), among in zip(dims, per_key, strict=True)
                     if len(among) < len(cases)], "and")
    return _all([_all([_in(key, cases, (c,)) for (key, cases), c in zip(dims, combo, strict=True)], "and")
                 for combo in group], "or")


def merged_template(dims: tuple[Cases, ...], texts: dict[tuple[Any, ...], str]) -> str:
    """One object's template from its text per combination of the ``dims``' cases (a combination
    without the object has no text): the text where every combination has the same one;
    otherwise, per group of combinations with the same text (the default's group first), that
    text under a condition on only the keys the text depends on (the last group, where every
    combination has the object, under ``else``)."""
    combos = list(itertools.product(*(cases for _, cases in dims)))
    first = texts.get(combos[0])
    if first is not None and all(texts.get(c) == first for c in combos):
        return first

    def depends(i: int) -> bool:
        return any(texts.get(c) != texts.get((*c[:i], other, *c[i + 1:]))
                   for c in combos for other in dims[i][1])

    on = [i for i in range(len(dims)) if depends(i)]
    groups: dict[str, list[tuple[Any, ...]]] = {}
    for c in combos:
        if c in texts and (seen := groups.setdefault(texts[c], [])).count(part := tuple(c[i] for i in on)) == 0:
            seen.append(part)
    out = []
    for n, (text, group) in enumerate(groups.items()):
        if n and n == len(groups) - 1 and len(texts) == len(combos):
            out.append("{{- else }}\n")
        else:
            out.append("{{- " + ("else " if n else "") + "if " + _when([dims[i] for i in on], group) + " }}\n")
        out.append(text)
    return "".join(out) + "{{- end }}\n"


def value_templates(keys: list[ValueKey]) -> str:
    """``templates/_values.tpl``: a named template per branched-on key (``value_template``)."""
    lines = ['{{- /* Generated by `python -m components.render` (components/chart.py); do not edit. */ -}}']
    for key in keys:
        lookup = "$.Values"
        for part in key.path[:-1]:
            lookup = f"(default (dict) (index {lookup} {json.dumps(part)}))"
        default = str(key.default).lower() if isinstance(key.default, bool) else key.default
        lines += [f'{{{{- define "{value_template(key)}" -}}}}',
                  f"{{{{- $v := index {lookup} {json.dumps(key.path[-1])} -}}}}",
                  f'{{{{- if kindIs "invalid" $v }}}}{_escape(str(default))}{{{{ else }}}}{{{{ $v }}}}{{{{ end -}}}}',
                  "{{- end }}"]
    return "\n".join(lines) + "\n"


def _chart_path(obj: dict[str, Any]) -> str:
    path = file_for(obj)
    assert path is not None
    return "templates/" + path.replace("pools/", "").lstrip("0123456789-")


def _templates(keys: tuple[ValueKey, ...], settings: dict[str, Any], split: ValueKey | None = None
               ) -> dict[Ident, tuple[str, str]]:
    """The sentinel render of one combination of the variants (in ``settings``): per object, its
    template file and text. A split key whose sentinel render is unmappable here is split into
    its default (written as it is) and every other value (``split``: that render, with another
    value in ``settings``)."""
    default = objects(None, settings)
    edits: dict[Ident, list[tuple[Path, _Edit]]] = {}
    unmapped: ValueKey | None = None
    for key in keys:
        if key.choices:
            continue
        try:
            found = key_edits(key, default, settings)
        except Unmappable:
            if not key.split or split is not None or unmapped is not None:
                raise
            unmapped = key
            continue
        for ident, changes in found.items():
            edits.setdefault(ident, []).extend(changes)
    out = {ident: (_chart_path(obj), _template_file(obj, edits.get(ident, []))) for ident, obj in default.items()}
    if split is not None:
        stays = _token(split.path, "other")
        if any(stays in text for _, text in out.values()):
            raise Unmappable(f"{split.dotted}: a value other than its default stays in a template")
    if unmapped is None:
        return out
    token = _token(unmapped.path, "other")
    other = _templates(keys, _merged(settings, nest(unmapped.path, unmapped.sentinel(token))), unmapped)
    if set(other) != set(out):
        raise Unmappable(f"{unmapped.dotted}: adds or removes objects")
    dims: tuple[Cases, ...] = ((unmapped, (unmapped.default, ANY_OTHER)),)
    return {ident: (path, merged_template(dims, {(unmapped.default,): text, (ANY_OTHER,): other[ident][1]}))
            for ident, (path, text) in out.items()}


# --- the chart ---------------------------------------------------------------------------------

def _header(first_always: bool) -> str:
    """A YAML comment above the file's first object, or a template comment where some combination
    has not that object (the YAML comment would then be a document of its own)."""
    return "# " + HEADER.lstrip("# ") if first_always else "{{- /* " + HEADER.lstrip("# ").strip() + " */}}\n"


def _template_file(obj: dict[str, Any], edits: list[tuple[Path, _Edit]]) -> str:
    return "\n".join(emit(template_tree(obj, edits), 0)) + "\n"


def _values(keys: tuple[ValueKey, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in keys:
        here = out
        for part in k.path[:-1]:
            here = here.setdefault(part, {})
        if k.default is not None:
            here[k.path[-1]] = k.default
    return out


def values_schema(keys: tuple[ValueKey, ...]) -> dict[str, Any]:
    root: dict[str, Any] = {"$schema": "https://json-schema.org/draft-07/schema#", "type": "object",
                            "additionalProperties": False, "properties": {}}
    for k in keys:
        here = root
        for part in k.path[:-1]:
            here = here["properties"].setdefault(part, {"type": "object", "additionalProperties": False,
                                                        "properties": {}})
        here["properties"][k.path[-1]] = {**k.schema, "description": k.doc}
    return root


def values_yaml(keys: tuple[ValueKey, ...]) -> str:
    """values.yaml: the defaults, and every key as a comment with what it sets."""
    lines = ["# Generated by `python -m components.render` (components/chart.py); do not edit.",
             "# Every key is a stack setting of the same name (docs/deploy.md, \"With Helm\"); unset keys",
             "# leave the objects as manifests/ has them. values.schema.json refuses unknown keys."]
    values = _values(keys)
    for top in dict.fromkeys(k.path[0] for k in keys):
        members = [k for k in keys if k.path[0] == top]
        for k in members:
            if k.default is None:
                lines.append(f"# {k.dotted}: {k.doc}")
        if top not in values and all(len(k.path) == 1 for k in members):
            continue  # a top-level key without a default: unset, said in its comment above
        lines.append(yaml.safe_dump({top: values.get(top, {})}, sort_keys=False, width=120).rstrip())
        for k in members:
            if k.default is not None and len(k.path) > 1:
                lines.insert(len(lines) - 1, f"# {k.dotted}: {k.doc}")
            elif k.default is not None:
                lines.insert(len(lines) - 1, f"# {k.doc}")
    return "\n".join(lines) + "\n"


def chart_yaml() -> str:
    return yaml.safe_dump({"apiVersion": "v2", "name": "autoclusters", "version": __version__,
                           "appVersion": __version__, "type": "application",
                           "description": "GPU node health: detector, remediation controller, admission webhook"},
                          sort_keys=False)


NOTES = """autoclusters {{ .Chart.Version }} is installed in namespace %s.
The webhook's TLS Secret is made by the controller. Once the webhook serves
(kubectl -n %s wait --for=condition=Available deployment/autoclusters-webhook),
install the pools: helm install autoclusters-pools charts/autoclusters-pools --values pools.yaml
(docs/deploy.md, "With Helm").
"""


def render_chart(settings: dict[str, Any] | None = None) -> dict[str, str]:
    """Relative path (under charts/autoclusters) → text of every file of the chart; ``settings``:
    render-time settings of a user's or a brand's own chart (``render_time_settings``), which
    ``components.render --config ... --out DIR`` writes into ``DIR/chart``.

    A few seconds (the sentinel render once per combination of the variants), so a process
    renders the chart of the same settings once (``stale()`` and the tests ask again)."""
    return dict(_chart(json.dumps(render_time_settings(settings or {}), sort_keys=True)))


@functools.cache
def _chart(settings_json: str) -> tuple[tuple[str, str], ...]:
    keys = value_keys()
    settings = json.loads(settings_json)
    dims = tuple((key, key.choices) for key in variants(keys))
    per_combo: dict[tuple[Any, ...], dict[Ident, tuple[str, str]]] = {}
    for combo in itertools.product(*(cases for _, cases in dims)):
        chosen: dict[str, Any] = {}
        for (key, _), value in zip(dims, combo, strict=True):
            chosen = _merged(chosen, nest(key.path, value))
        per_combo[combo] = _templates(keys, _merged(settings, chosen))
    files: dict[str, list[str]] = {}
    first_always: dict[str, bool] = {}
    for ident in dict.fromkeys(ident for templates in per_combo.values() for ident in templates):
        name = next(templates[ident][0] for templates in per_combo.values() if ident in templates)
        texts = {combo: templates[ident][1] for combo, templates in per_combo.items() if ident in templates}
        files.setdefault(name, []).append(merged_template(dims, texts))
        first_always.setdefault(name, len(texts) == len(per_combo))
    out = {name: _header(first_always[name]) + "---\n".join(texts) for name, texts in sorted(files.items())}
    out["templates/_values.tpl"] = value_templates([*variants(keys), *(k for k in keys if k.split)])
    out["Chart.yaml"] = "# " + HEADER.lstrip("# ") + chart_yaml()
    out["values.yaml"] = values_yaml(keys)
    out["values.schema.json"] = json.dumps(values_schema(keys), indent=2) + "\n"
    out["templates/NOTES.txt"] = NOTES % (_DEFAULTS.namespace, _DEFAULTS.namespace)
    return tuple(out.items())
