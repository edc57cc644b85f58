"""Pool membership: one rule (``pools.membership``), and the controller and the operator
tools read it alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from autoclusters.api import RepairAction
from autoclusters.controller.cache import Fleet
from autoclusters.deploy.crds import pool_schema
from autoclusters.faults.catalog import load_catalog
from autoclusters.ops import resources as res
from autoclusters.ops.snapshot import build_snapshot, default_policy_of
from autoclusters.pools import default_pool
from autoclusters.pools.membership import Membership, config_of
from autoclusters.pools.pool_config import PoolConfigError, pool_from_config
from tests.unit import builders
from tests.unit.builders import NAMES

NOW = datetime(2026, 1, 1, tzinfo=UTC)
Z1 = {"matchLabels": {"zone": "z1"}}


def pool(name: str, selector: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def node(name: str, **labels: str) -> dict[str, Any]:
    lab = {NAMES.pool_label if k == "pool" else k: v for k, v in labels.items()}
    return builders.node(name, pool="", labels=lab, detected=False)


POOLS = [
    pool("a"),
    pool("sel", Z1),
    pool("sel-b", {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}),
    pool("off", consentMode="off"),
    pool("broken", consentMode="sometimes"),  # invalid: ignored by the controller
]
NODES = [
    node("label-and-selector", pool="a", zone="z1"),  # the reproduced disagreement
    node("label-only", pool="a"),
    node("selector-only", zone="z1"),
    node("second-selector", zone="z2"),
    node("label-names-selector-pool", pool="sel"),  # sel is defined by its selector alone
    node("label-names-selector-pool-and-matches", pool="sel", zone="z2"),
    node("label-names-missing-pool", pool="gone"),
    node("label-names-missing-pool-in-zone", pool="gone", zone="z1"),
    node("label-names-invalid-pool", pool="broken"),
    node("nothing"),
]
EXPECTED = {
    "label-and-selector": "a",
    "label-only": "a",
    "selector-only": "sel",
    "second-selector": "sel-b",
    "label-names-selector-pool": "",
    "label-names-selector-pool-and-matches": "sel-b",
    "label-names-missing-pool": "",
    "label-names-missing-pool-in-zone": "sel",
    "label-names-invalid-pool": "",
    "nothing": "",
}


# The cluster default policy: absent (the reference default, mode auto) or switched off.
REFERENCE = None
DEFAULT_OFF = default_pool.configmap({"consentMode": "off"}, "ns")
UNDER_DEFAULT = {**EXPECTED, "label-names-missing-pool": "gone"}  # the label names no pool: its own, by default


def controller_view(pools: list[dict[str, Any]], nodes: list[dict[str, Any]],
                    default: dict[str, Any] | None = DEFAULT_OFF) -> dict[str, str]:
    fleet = Fleet(object(), NAMES, load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    fleet._on_default("default", None, default)
    for p in pools:
        fleet._on_pool(p["metadata"]["name"], None, p)
    out = {}
    for n in nodes:
        fleet._on_node(n["metadata"]["name"], None, n)
        found = fleet.pool_for(n)
        assert fleet.pool_name_of_node(n["metadata"]["name"]) == (found.name if found else "")
        out[n["metadata"]["name"]] = found.name if found else ""
    return out


def status_view(pools: list[dict[str, Any]], nodes: list[dict[str, Any]],
                default: dict[str, Any] | None = DEFAULT_OFF) -> dict[str, str]:
    """Where ``autoclusters status`` counts each node (a node in no pool is counted nowhere)."""
    out = {n["metadata"]["name"]: "" for n in nodes}
    for n in nodes:
        snap = build_snapshot([n], pools, [], NAMES, NOW, default_policy=default_policy_of(default, "ns"))
        counted = [p.name for p in snap.pools if p.nodes]
        assert len(counted) <= 1
        out[n["metadata"]["name"]] = counted[0] if counted else ""
    return out


def test_the_rule() -> None:
    membership, invalid = Membership.from_objects(POOLS, NAMES)
    assert set(invalid) == {"broken"}
    assert {n["metadata"]["name"]: membership.pool_of(n) or "" for n in NODES} == EXPECTED


@pytest.mark.parametrize("order", [POOLS, POOLS[::-1]], ids=["by-name", "reversed"])
@pytest.mark.parametrize(("default", "expected"), [(DEFAULT_OFF, EXPECTED), (REFERENCE, UNDER_DEFAULT)],
                         ids=["default-off", "reference-default"])
def test_controller_and_operator_tools_agree(order: list[dict[str, Any]], default: dict[str, Any] | None,
                                             expected: dict[str, str]) -> None:
    pool_of, _ = res.pool_reader(order, NAMES, default=default is REFERENCE)
    assert controller_view(order, NODES, default) == expected
    assert status_view(order, NODES, default) == expected
    assert {n["metadata"]["name"]: pool_of(n) for n in NODES} == expected


def test_the_default_policy_is_shown_and_applies_to_label_only_pools() -> None:
    fleet = Fleet(object(), NAMES, load_catalog(), lambda _key: None)  # type: ignore[arg-type]  # no call is made
    for p in POOLS:
        fleet._on_pool(p["metadata"]["name"], None, p)
    spec = {"consentMode": "propose", "maxConcurrentRepairs": 2, "provider": {"type": "hostReboot"}}
    fleet._on_default("d", None, default_pool.configmap(spec, "ns"))
    gone = fleet.pool_for(node("x", pool="gone"))
    assert gone is not None and gone.default and gone.name == "gone"
    assert gone.mode == "propose" and gone.config.max_concurrent_repairs == 2
    assert gone.provider_for(RepairAction.RESET) is not None and gone.provider_for(RepairAction.REPLACE) is None
    assert fleet.pool_for(node("y", pool="broken")) is None  # an invalid GpuNodePool is not replaced by the default
    snap = build_snapshot([node("x", pool="gone")], POOLS, [], NAMES, NOW,
                          default_policy=default_policy_of(default_pool.configmap(spec, "ns"), "ns"))
    (summary,) = [p for p in snap.pools if p.name == "gone"]
    assert summary.default_policy and summary.consent_mode == "propose"
    assert snap.default_policy is not None and snap.default_policy.providers == "reset=hostReboot"
    assert "ConfigMap ns/autoclusters-default-pool" in snap.default_policy.source
    bad = default_policy_of({"data": {"spec": '{"consentMode": "sometimes"}'}}, "ns")
    assert bad.consent_mode == "auto" and "consentMode" in bad.error  # the reference default stays in force


def test_status_names_the_ignored_pool() -> None:
    snap = build_snapshot(NODES, POOLS, [], NAMES, NOW)
    assert any("broken" in note and "consentMode" in note for note in snap.notes)


def test_without_the_pool_crd_the_label_is_shown_as_is() -> None:
    pool_of, invalid = res.pool_reader(None, NAMES)
    assert pool_of(node("n", pool="gone", zone="z1")) == "gone" and invalid == {}


@pytest.mark.parametrize(("selector", "complaint"), [
    ({}, "select every node"),
    ({"matchLabels": {}}, "select every node"),
    ({"matchLabels": {}, "matchExpressions": []}, "select every node"),
    ({"zone": "z1"}, "unknown key(s) zone"),  # a bare mapping: the API server would prune it to {}
    ({"matchExpressions": [{"key": "zone", "operator": "In"}]}, "needs values"),
    ({"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["x"]}]}, "takes no values"),
    ({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}, "operator must be one of"),
    ({"matchLabels": {"zone": "not a value"}}, "is not a label value"),
])
def test_a_selector_that_selects_everything_or_nothing_sensible_is_refused(selector: dict, complaint: str) -> None:
    with pytest.raises(PoolConfigError, match="nodeSelector") as e:
        pool_from_config({"name": "p", "nodeSelector": selector})
    assert complaint in str(e.value)
    with pytest.raises(PoolConfigError):
        config_of(pool("p", selector))


def test_the_crd_refuses_an_empty_selector_too() -> None:
    rules = pool_schema()["properties"]["spec"]["properties"]["nodeSelector"]["x-kubernetes-validations"]
    assert len(rules) == 1 and "matchLabels" in rules[0]["rule"] and "matchExpressions" in rules[0]["rule"]
