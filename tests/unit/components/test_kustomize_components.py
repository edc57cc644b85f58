"""The kustomize components (``manifests/components/``, components/kustomize_components.py): each,
applied to the base's objects as kustomize applies it (its resources added, its JSON6902 patches
applied by ``jsonpatch``, an implementation independent of ours, its delete patches), gives the
objects the stack settings it stands for render; every combination either does too or is refused
by the patches' ``test`` operations; the differ on its own, and the docs table."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from components import render
from components.kustomize_components import (
    DOCS_MARKER,
    JOURNAL_WITHOUT_NVML,
    KUSTOMIZATION,
    PROMETHEUS_OPERATOR,
    TOGGLES,
    Toggle,
    component,
    diff,
    docs_table,
    pointer,
)

Ident = tuple[str, str, str, str]
DOCS = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"


def _ident(obj: dict[str, Any]) -> Ident:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _load(texts: Iterable[str]) -> dict[Ident, dict[str, Any]]:
    return {_ident(o): o for t in texts for o in yaml.safe_load_all(t) if o}


def base() -> dict[Ident, dict[str, Any]]:
    """The objects of the committed base, as kustomize reads them (its kustomization's resources)."""
    resources = yaml.safe_load((render.MANIFESTS / KUSTOMIZATION).read_text())["resources"]
    return _load((render.MANIFESTS / r).read_text() for r in resources)


def rendered(settings: Mapping[str, Any]) -> dict[Ident, dict[str, Any]]:
    """What ``components.render --config`` writes for these settings, without pools: the base's files."""
    return _load(text for path, text in render.render({"pools": [], **settings}).items()
                 if "/" not in path and path != KUSTOMIZATION)


def _matches(obj: dict[str, Any], target: dict[str, str]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    have = {"group": group, "version": version, "kind": obj["kind"], **obj["metadata"]}
    return all(have.get(k, "") == v for k, v in target.items())


def apply(objects: dict[Ident, dict[str, Any]], files: Mapping[str, str]) -> dict[Ident, dict[str, Any]]:
    """A Component's files (``component()``'s, or a folder's read back) applied as kustomize applies
    them: resources added, then each patch (JSON6902 by target, or a ``$patch: delete``)."""
    out = copy.deepcopy(objects)
    kustomization = yaml.safe_load(files[KUSTOMIZATION])
    assert kustomization["kind"] == "Component"
    added = _load(files[r] for r in kustomization.get("resources", []))
    assert not added.keys() & out.keys()
    out.update(added)
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load(patch["patch"])
        if "target" not in patch:
            assert body.pop("$patch") == "delete"
            del out[_ident(body)]
            continue
        [ident] = [i for i, o in out.items() if _matches(o, patch["target"])]
        out[ident] = jsonpatch.apply_patch(out[ident], body)
    return out


def committed(toggle: Toggle) -> dict[str, str]:
    folder = render.KUSTOMIZE_COMPONENTS / toggle.name
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


def merged(settings: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in settings:
        for k, v in s.items():
            out[k] = merged([out[k], v]) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


@pytest.mark.parametrize("toggle", TOGGLES, ids=lambda t: t.name)
def test_each_component_over_the_base_renders_its_settings(toggle: Toggle) -> None:
    result = apply(base(), committed(toggle))
    assert result == rendered(toggle.settings)
    assert result != base(), f"{toggle.name} changes nothing"


def test_components_compose_exactly_or_refuse_each_other() -> None:
    """Every combination, in the table's order (kustomize applies a kustomization's components in
    the order it lists them): the render of the settings together, or a ``test`` failing. Two that
    refuse each other have a component that stands for both."""
    files = {t.name: committed(t) for t in TOGGLES}
    refused = []
    for n in range(2, len(TOGGLES) + 1):
        for combination in itertools.combinations(TOGGLES, n):
            try:
                result = base()
                for t in combination:
                    result = apply(result, files[t.name])
            except jsonpatch.JsonPatchTestFailed:
                refused.append(combination)
                continue
            assert result == rendered(merged(t.settings for t in combination)), [t.name for t in combination]
    settings = [dict(t.settings) for t in TOGGLES]
    for a, b in (c for c in refused if len(c) == 2):
        assert merged([a.settings, b.settings]) in settings, f"{a.name} and {b.name} refuse each other"
    assert any(len(c) == 2 for c in refused)  # the journal and NVML ones do
    # all three settings together: the combined component and the monitoring one
    everything = merged(t.settings for t in TOGGLES)
    assert everything == merged([JOURNAL_WITHOUT_NVML.settings, PROMETHEUS_OPERATOR.settings])
    assert apply(apply(base(), files[JOURNAL_WITHOUT_NVML.name]), files[PROMETHEUS_OPERATOR.name]) == \
        rendered(everything)


def test_a_setting_that_removes_objects_becomes_delete_patches() -> None:
    """controllerShards (no component: a number, not a toggle) replaces the controller Deployment
    by the shards': the unsharded objects go by delete patches, the shards' come as resources."""
    settings = {"controllerShards": 2}
    files = component(settings)
    patches = yaml.safe_load(files[KUSTOMIZATION])["patches"]
    assert any("target" not in p for p in patches)
    assert apply(base(), files) == rendered(settings)


@pytest.mark.parametrize(("a", "b"), [
    ({"args": ["run", "--x"]}, {"args": ["run", "--x", "--y", "1"]}),  # another length: the whole list
    ({"l": [1, 2, 3]}, {"l": [3, 1, 2]}),  # reordered: the whole list
    ({"v": [{"name": "a", "p": 1}]}, {"v": [{"name": "b", "p": 1}]}),  # another named item: the whole list
    ({"v": [{"name": "a", "p": 1}, {"name": "b"}]}, {"v": [{"name": "a", "p": 2}, {"name": "b"}]}),  # item by item
    ({"keep": 1, "gone": {"deep": [1]}}, {"keep": 1}),  # a key removed
    ({"m": {}}, {"m": {"new": None}}),  # a key added (null is a value)
    ({"a/b": {"c~d": 1}}, {"a/b": {"c~d": 2}}),  # escaped in the pointer
    ({"x": 1}, {"x": True}),  # a type change is a change
    ({"x": 1}, {"x": 1.0}),
    ({"x": [1]}, {"x": {"0": 1}}),
])
def test_the_diff_turns_one_value_into_the_other_exactly(a: dict[str, Any], b: dict[str, Any]) -> None:
    ops = diff(a, b)
    result = jsonpatch.apply_patch(a, ops)
    assert result == b and [type(v) for v in result.values()] == [type(v) for v in b.values()]
    for i, op in enumerate(ops):  # what it takes away, it tests first
        if op["op"] in ("replace", "remove"):
            assert ops[i - 1] == {"op": "test", "path": op["path"], "value": jsonpatch.JsonPointer(
                op["path"]).resolve(a)}
    assert diff(a, a) == []


def test_the_diff_writes_lists_whole_or_item_by_item() -> None:
    assert [o["op"] for o in diff({"l": [1, 2]}, {"l": [1, 2, 3]})] == ["test", "replace"]
    assert diff({"l": [1, 2]}, {"l": [2, 1]})[-1] == {"op": "replace", "path": "/l", "value": [2, 1]}
    assert diff({"l": [1, 2]}, {"l": [1, 5]})[-1] == {"op": "replace", "path": "/l/1", "value": 5}
    assert pointer(("metadata", "annotations", "a.io/x~y", 0)) == "/metadata/annotations/a.io~1x~0y/0"


def test_a_patch_refuses_a_base_it_was_not_computed_from() -> None:
    ops = diff({"args": ["a"]}, {"args": ["a", "b"]})
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch({"args": ["other"]}, ops)


def test_every_component_is_in_the_docs_table() -> None:
    from autoclusters import doc_tables

    page = DOCS.read_text()
    assert page == doc_tables.with_table(page, DOCS_MARKER, docs_table()), \
        "docs/deploy.md: run `python -m components.kustomize_components docs/deploy.md` (make manifests)"
    assert all(f"`{t.name}`" in docs_table() for t in TOGGLES)
