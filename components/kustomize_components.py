"""``manifests/components/<name>/``: kustomize Components for the stack settings that change the
objects' structure rather than a value in place (issue 29 item 3), so that a kustomize user
composes them over the base ``manifests/`` instead of rendering a set of their own.

``TOGGLES`` declares each component once: its folder, the stack settings it stands for and what
it does. Its files are a difference, computed rather than written by hand: the base's objects
(``manifests/`` without its pools) are rendered with the defaults and with the component's
settings (``autoclusters.deploy.stack.stack_objects``, as for ``manifests/`` and the Helm chart),
and the Component holds

- the objects only the settings' render has, as its resource files (named as ``manifests/``
  names their files: ``06-prometheus-operator.yaml``),
- a JSON6902 patch per changed object (``diff``: an exact JSON difference; a list whose length,
  order or named items changed is replaced whole),
- a delete patch per object the settings' render lacks.

Each patch first ``test``s the values it replaces or removes, so a component applies only over
what it was computed from: two components that rewrite the same field (``kernel-log-journal``
and ``nvml-disabled`` both rewrite the detector's flags, mounts and volumes, and together they
mount the journal differently from either alone) make kustomize fail ("testing value ...
failed") instead of one silently undoing the other; their combination is a component of its own.
Components that touch different fields compose: together they render what the stack settings
together render (tests/unit/components/test_kustomize_components.py applies every combination;
tests/integration/test_kustomize_components.py runs the real ``kubectl kustomize``).
``python -m components.render`` writes them and ``--check`` fails when they are stale.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from components import chart
from components.manifest_objects import (
    HEADER,
    file_for,
    file_order,
    yaml_documents,
    yaml_text,
)

FOLDER = "components"  # under manifests/
KUSTOMIZATION = "kustomization.yaml"
API_VERSION = "kustomize.config.k8s.io/v1alpha1"
Ident = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Op = dict[str, Any]  # one JSON6902 operation


@dataclass(frozen=True)
class Toggle:
    """One component: its folder under ``manifests/components/``, the stack settings it stands
    for (the keys of ``autoclusters.deploy.stack_config``), and what it does."""

    name: str
    settings: Mapping[str, Any]
    doc: str


def _together(a: Toggle, b: Toggle, why: str) -> Toggle:
    """The component of two whose patches refuse each other."""
    return Toggle(f"{a.name}-{b.name}", {**a.settings, **b.settings},
                  f"`{a.name}` and `{b.name}` together (the two refuse each other: {why})")


KERNEL_LOG_JOURNAL = Toggle(
    "kernel-log-journal", {"kernelLogSource": "journal"},
    "the detectors read the kernel's entries of the host's systemd journal instead of /dev/kmsg "
    "(their flags, mounts and volumes; docs/detector.md, \"The journald source\")")
NVML_DISABLED = Toggle(
    "nvml-disabled", {"nvml": {"enabled": False}},
    "the detectors run without their NVML source (`--no-nvml`): no NVML flags, no host mount")
PROMETHEUS_OPERATOR = Toggle(
    "prometheus-operator", {"monitoring": {"prometheusOperator": True}},
    "adds a PodMonitor each for the controller, the detectors and the webhook, and the PrometheusRule "
    "with the shipped alerts (the cluster needs the Prometheus Operator's CRDs)")
JOURNAL_WITHOUT_NVML = _together(KERNEL_LOG_JOURNAL, NVML_DISABLED, "both rewrite the detector's flags, mounts and "
                                 "volumes, and without NVML's host mount the journal gets mounts of its own")
TOGGLES: tuple[Toggle, ...] = (KERNEL_LOG_JOURNAL, NVML_DISABLED, JOURNAL_WITHOUT_NVML, PROMETHEUS_OPERATOR)


def system_objects(settings: Mapping[str, Any] | None = None) -> dict[Ident, dict[str, Any]]:
    """The objects (as ``manifests/`` holds them) with ``settings`` over the defaults, by
    identity: every object ``manifests/`` renders, no pools (GitOps grants: every provider); the
    chart's objects (``chart.objects``), keyed with their apiVersion too."""
    return {(obj["apiVersion"], *ident): obj for ident, obj in chart.objects(None, dict(settings or {})).items()}


def pointer(path: tuple[str | int, ...]) -> str:
    """The JSON pointer (RFC 6901) of a path: ``~`` and ``/`` in a key escaped."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: ``True`` is not ``1``, ``1`` is not ``1.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _itemwise(a: list[Any], b: list[Any]) -> bool:
    """Whether a list's change is written item by item: the same length, not reordered, and each
    index holds the same item in both (a map item by its ``name``: a volume, a mount, a container)."""
    if len(a) != len(b) or sorted(map(repr, a)) == sorted(map(repr, b)):  # a multiset: reordered
        return False
    return all(not (isinstance(x, dict) and isinstance(y, dict)) or x.get("name") == y.get("name")
               for x, y in zip(a, b, strict=True))


def _changes(a: Any, b: Any, path: tuple[str | int, ...]) -> Iterator[Op]:
    if _same(a, b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                yield {"op": "remove", "path": pointer((*path, k)), "old": a[k]}
            else:
                yield from _changes(a[k], b[k], (*path, k))
        for k in b:
            if k not in a:
                yield {"op": "add", "path": pointer((*path, k)), "value": b[k]}
    elif isinstance(a, list) and isinstance(b, list) and _itemwise(a, b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _changes(x, y, (*path, i))
    else:  # a scalar, a type change, a list of other length, order or items: the whole value
        yield {"op": "replace", "path": pointer(path), "old": a, "value": b}


def diff(a: Any, b: Any) -> list[Op]:
    """The JSON6902 operations that turn ``a`` into ``b`` exactly: dicts recursed into, a list
    of the same length, order and items (by ``name``) item by item, anything else replaced
    whole; each ``replace`` and ``remove`` preceded by a ``test`` of the value it takes away."""
    ops: list[Op] = []
    for change in _changes(a, b, ()):
        old = change.pop("old", None)
        if change["op"] != "add":
            ops.append({"op": "test", "path": change["path"], "value": old})
        ops.append(change)
    return ops


def _target(ident: Ident) -> dict[str, str]:
    api_version, kind, namespace, name = ident
    group, _, version = api_version.rpartition("/")
    target = {"group": group, "version": version, "kind": kind, "name": name, "namespace": namespace}
    return {k: v for k, v in target.items() if v}


def _delete(obj: dict[str, Any]) -> str:
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace")}
    return yaml_text({"$patch": "delete", "apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta})


def component(settings: Mapping[str, Any], doc: str = "") -> dict[str, str]:
    """Relative path → text of the Component that turns the base into the render with
    ``settings``: its ``kustomization.yaml`` and the resource files it adds."""
    default, variant = system_objects(), system_objects(settings)
    for ident in default.keys() | variant.keys():
        obj = variant.get(ident) or default[ident]
        if "/" in (file_for(obj) or "") and not _same(default.get(ident), variant.get(ident)):
            raise ValueError(f"{dict(settings)} changes {ident[1]} {ident[3]}, which manifests/' base does not hold")
    added: dict[str, list[dict[str, Any]]] = {}
    for ident in variant.keys() - default.keys():
        added.setdefault(file_for(variant[ident]) or "", []).append(variant[ident])
    patches: list[dict[str, Any]] = []
    for ident in sorted(default.keys() & variant.keys()):
        ops = diff(default[ident], variant[ident])
        if ops:
            patches.append({"target": _target(ident), "patch": yaml_text(ops)})
    patches += [{"patch": _delete(default[ident])} for ident in sorted(default.keys() - variant.keys())]
    kustomization: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Component"}
    if added:
        kustomization["resources"] = sorted(added)
    if patches:
        kustomization["patches"] = patches
    said = "".join(f"# {line}\n" for line in textwrap.wrap(f"{inline(settings)}: {doc}", 100)) if doc else ""
    files = {KUSTOMIZATION: HEADER + said + yaml_text(kustomization)}
    files.update({path: HEADER + yaml_documents(sorted(objs, key=file_order)) for path, objs in added.items()})
    return files


def inline(settings: Mapping[str, Any]) -> str:
    """Stack settings on one line, as YAML: ``{nvml: {enabled: false}}``."""
    return yaml.safe_dump(dict(settings), default_flow_style=True, width=10_000).strip()


def render_components() -> dict[str, str]:
    """``<name>/<file>`` → text of every component of ``TOGGLES`` (under ``manifests/components/``)."""
    return {f"{t.name}/{path}": text for t in TOGGLES for path, text in component(t.settings, t.doc).items()}


def docs_table() -> str:
    lines = ["| component (`manifests/components/...`) | the stack settings | what it does |", "|---|---|---|"]
    lines += [f"| `{t.name}` | `{inline(t.settings)}` | {t.doc} |" for t in TOGGLES]
    return "\n".join(lines)


DOCS_MARKER = "<!-- kustomize-components-table"


if __name__ == "__main__":  # make manifests: python -m components.kustomize_components docs/deploy.md
    import sys

    from autoclusters import doc_tables

    doc_tables.rewrite(sys.argv[1], DOCS_MARKER, docs_table())
