"""Provider type names are written once (autoclusters/deploy/providers.py): the CRD schema,
the controller's registry of builders and the pool policy's Rego data are proven equal to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoclusters.deploy.crds import pool_schema
from autoclusters.deploy.providers import KINDS, ProviderType, actions, rego_data, rego_module
from autoclusters.rego import opa
from tests.conftest import tool_missing

POLICIES = Path(__file__).resolve().parents[3] / "policies"
PYTHON_TYPES = {t.value for t in ProviderType}


def _crd_provider() -> dict:
    return pool_schema()["properties"]["spec"]["properties"]["provider"]


def test_generated_rego_module_is_current() -> None:
    assert (POLICIES / "lib" / "providers.rego").read_text() == rego_module(), (
        "policies/lib/providers.rego is stale: run `make manifests`")


def test_crd_enums_equal_python() -> None:
    crd = _crd_provider()
    assert set(crd["properties"]["type"]["enum"]) == PYTHON_TYPES
    assert set(crd["properties"]) >= PYTHON_TYPES  # one settings object per type
    for action in actions():
        able = {k.type for k in KINDS.values() if action in k.actions}
        assert set(crd["properties"][action]["properties"]["type"]["enum"]) == able


def test_every_type_has_a_builder() -> None:
    """The built-in types are those registered (providers/registry.py), each with its builder."""
    assert set(KINDS) == PYTHON_TYPES and all(k.build is not None for k in KINDS.values())


def test_opa_sees_the_same_types_and_actions() -> None:
    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    value = opa.evaluate("data.autoclusters.lib.providers.providers", {}, {}, policies=POLICIES)
    assert set(value["types"]) == PYTHON_TYPES
    assert value == rego_data()
    assert {t: set(v["actions"]) for t, v in value["types"].items()} == {
        k.type: set(k.actions) for k in KINDS.values()}


@pytest.mark.parametrize("kind", sorted(KINDS, key=str))
def test_crd_settings_equal_python(kind: str) -> None:
    props = _crd_provider()["properties"][kind]
    assert set(props["properties"]) == {s.name for s in KINDS[kind].settings}
    assert set(props.get("required", [])) == {s.name for s in KINDS[kind].settings if s.required}


def test_the_controller_roles_grant_what_each_provider_needs() -> None:
    from autoclusters.deploy.controller import controller_rbac
    from autoclusters.names import Names

    cluster_role, _, role, _, *_policy = controller_rbac(Names())

    def granted(rules: list[dict], group: str, resource: str) -> set[str]:
        return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}

    for kind in KINDS.values():
        for need in kind.rbac:
            rules = role["rules"] if need.namespaced else cluster_role["rules"]
            assert set(need.verbs) <= granted(rules, need.group, need.resource), (kind.type, need)
    assert granted(cluster_role["rules"], "batch", "jobs") == set()  # Jobs only in the controller's namespace
    assert granted(role["rules"], "batch", "jobs") == {"get", "create", "delete"}


def test_the_docs_provider_table_shows_every_registered_provider_and_its_actions() -> None:
    """docs/controller.md's providers table: one row per registered type, and a "—" exactly in the
    column of an action (reset, replace) the type does not support."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "controller.md").read_text()
    table = doc.split("<!-- providers-table", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    columns = [c.strip() for c in table[0].strip("|").split("|")]
    assert columns[:3] == ["type", "reset", "replace"]
    rows = {}
    for row in table[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    assert set(rows) == set(KINDS)
    for name, cells in rows.items():
        for column, cell in zip(columns[1:3], cells[1:3], strict=True):
            assert cell.startswith("—") == (column not in KINDS[name].actions), (name, column)
