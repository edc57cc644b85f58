"""The API's enums and pool defaults are written once (autoclusters/api.py): the CRD schemas,
the strict parser, the controller's defaults, the CLI's choices and what ``opa eval`` returns
for the pool policy's sets are proven equal to it."""

from __future__ import annotations

import ast
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from autoclusters import api, pool_fields
from autoclusters.api import BreakerState, ClassAction, ConsentMode, FaultClass, Phase, RepairAction
from autoclusters.deploy.crds import crds, pool_schema, remediation_schema
from autoclusters.names import Names
from autoclusters.pools.pool_config import PoolConfig, PoolConfigError, pool_from_config, pool_spec
from autoclusters.rego import opa
from tests.conftest import tool_missing

POLICIES = Path(__file__).resolve().parents[3] / "policies"


def _values(kind: type[Enum]) -> list[str]:
    return [m.value for m in kind]


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        schema = schema["properties"][part]
    return schema


def test_generated_rego_module_is_current() -> None:
    assert (POLICIES / "lib" / "api.rego").read_text() == api.rego_module(), (
        "policies/lib/api.rego is stale: run `make manifests`")


def test_crd_enums_equal_python() -> None:
    pool, rem = pool_schema(), remediation_schema()
    assert _at(pool, "spec.consentMode")["enum"] == _values(ConsentMode)
    assert _at(pool, "spec.consentMode")["default"] == api.DEFAULT_CONSENT_MODE
    classes = _at(pool, "spec.faultClasses")["properties"]
    assert list(classes) == _values(FaultClass)
    assert all(c["enum"] == _values(ClassAction) for c in classes.values())
    assert _at(pool, "status.circuitBreaker.state")["enum"] == _values(BreakerState)
    assert _at(rem, "spec.consentMode")["enum"] == _values(ConsentMode)
    assert _at(rem, "spec.fault.class")["enum"] == _values(FaultClass)
    assert _at(rem, "spec.action")["enum"] == _at(rem, "status.action")["enum"] == _values(RepairAction)
    assert _at(rem, "status.phase")["enum"] == _values(Phase)


def test_crd_names_equal_python() -> None:
    for crd, resource in zip(crds(Names()), (api.POOLS, api.REMEDIATIONS), strict=True):
        spec = crd["spec"]
        assert spec["group"] == f"{api.GROUP_PREFIX}.{Names().domain}"
        assert [v["name"] for v in spec["versions"]] == list(api.SERVED_VERSIONS)
        assert [v["name"] for v in spec["versions"] if v["storage"]] == [api.VERSION]
        assert (spec["names"]["kind"], spec["names"]["plural"], spec["names"]["shortNames"]) == (
            resource.kind, resource.plural, [resource.short_name])


def test_the_override_actions_are_the_repair_actions_and_two_words() -> None:
    """The three action enums share their repair actions (a new one appears in all three), and
    they are the built-in actions of the action table, in its order (which the CRD, the parser,
    the state machine and the pool policy's repairCodes read)."""
    from autoclusters.providers.actions import ACTIONS

    assert set(ClassAction) == {*RepairAction, ClassAction.DEFAULT, ClassAction.OFF}
    assert set(api.CatalogAction) == {*RepairAction, api.CatalogAction.NONE}
    assert [a.value for a in RepairAction] == list(ACTIONS.names())


def test_the_phase_roles_are_disjoint_phases() -> None:
    assert not (api.TERMINAL & api.HOLDING) and not (api.TERMINAL & api.IN_PROGRESS) and not (
        api.HOLDING & api.IN_PROGRESS)


@pytest.mark.parametrize("limit", pool_fields.INTEGERS, ids=lambda lim: lim.path)
def test_crd_parser_and_spec_share_each_default_and_range(limit: pool_fields.Setting) -> None:
    schema = _at(pool_schema(), "spec." + limit.path)
    assert (schema["default"], schema["minimum"], schema.get("maximum")) == (
        limit.default, limit.minimum, limit.maximum)
    group, _, name = limit.path.rpartition(".")

    def raw(value: int) -> dict[str, Any]:
        inner: dict[str, Any] = {name: value}
        if group == "preDrain.hook":
            inner = {"preDrain": {"hook": {"url": "https://example.test/hook", **inner}}}
        elif group:
            inner = {group: inner}
        if limit is pool_fields.BREAKER_CLOSE_BELOW_PERCENT:  # close may not exceed open
            inner["circuitBreaker"]["openAbovePercent"] = pool_fields.BREAKER_OPEN_ABOVE_PERCENT.maximum
        if limit is pool_fields.BREAKER_OPEN_ABOVE_PERCENT:
            inner["circuitBreaker"]["closeBelowPercent"] = pool_fields.BREAKER_CLOSE_BELOW_PERCENT.minimum
        return {"name": "p", **inner}

    written: Any = pool_spec(pool_from_config({"name": "p", "preDrain": {"hook": {"url": "https://example.test/hook"}}}))
    for part in limit.path.split("."):
        written = written[part]
    assert written == limit.default  # the parser's default, written out
    assert limit.minimum is not None
    pool_from_config(raw(limit.minimum))
    with pytest.raises(PoolConfigError, match=limit.path.replace(".", r"\.")):
        pool_from_config(raw(limit.minimum - 1))
    if limit.maximum is not None:
        pool_from_config(raw(limit.maximum))
        with pytest.raises(PoolConfigError, match=limit.path.replace(".", r"\.")):
            pool_from_config(raw(limit.maximum + 1))


def test_pool_config_and_the_controller_default_to_the_api() -> None:
    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.statemachine import RepairPolicy

    pool = PoolConfig("p")
    assert pool.consent_mode is api.DEFAULT_CONSENT_MODE
    assert (pool.reset_deadline_seconds, pool.replace_deadline_seconds, pool.refault_window_seconds,
            pool.reset_memory_seconds, pool.max_repairs, pool.pre_drain.wait_seconds) == (
        pool_fields.RESET_DEADLINE_SECONDS.default, pool_fields.REPLACE_DEADLINE_SECONDS.default,
        pool_fields.REFAULT_WINDOW_SECONDS.default, pool_fields.RESET_MEMORY_SECONDS.default,
        pool_fields.MAX_REPAIRS.default, pool_fields.PRE_DRAIN_WAIT_SECONDS.default)
    policy, config = RepairPolicy(), ControllerConfig()
    assert (policy.reset_drain_seconds, policy.replace_drain_seconds, policy.refault_window_seconds,
            policy.reset_memory_seconds, policy.max_repairs, policy.pre_drain_wait_seconds) == (
        pool.reset_deadline_seconds, pool.replace_deadline_seconds, pool.refault_window_seconds,
        pool.reset_memory_seconds, pool.max_repairs, pool.pre_drain.wait_seconds)
    shared = {f.name for f in fields(RepairPolicy)} & {f.name for f in fields(ControllerConfig)}
    assert shared == {"verify_timeout_seconds", "operation_timeout_seconds", "poll_seconds", "hold_recheck_seconds"}
    assert {k: getattr(policy, k) for k in shared} == {k: getattr(config, k) for k in shared}


def test_the_simulated_provider_takes_the_controllers_seconds() -> None:
    """One default for a simulated reset / replacement (it was 30 s at the controller's flag and
    5 s in the provider's own signature; only the flag's ever took effect)."""
    import inspect

    from autoclusters.controller.controller_config import ControllerConfig
    from autoclusters.controller.reconciler import Settings
    from autoclusters.providers.registry import BuildContext
    from autoclusters.sim.provider import SimulatedProvider

    params = inspect.signature(SimulatedProvider).parameters
    config = ControllerConfig()
    for field, value in (("sim_reset_seconds", api.SIM_RESET_SECONDS),
                         ("sim_replace_seconds", api.SIM_REPLACE_SECONDS)):
        assert getattr(config, field) == value
        assert {f.name: f.default for f in fields(Settings)}[field] == value
        assert {f.name: f.default for f in fields(BuildContext)}[field] == value
        assert params[field.removeprefix("sim_")].default == value


def test_the_cli_offers_the_consent_modes() -> None:
    import argparse

    from autoclusters.cli import pool as pool_cli

    parser = argparse.ArgumentParser()
    pool_cli.register(parser.add_subparsers())
    for mode in ConsentMode:
        assert parser.parse_args(["pool", "set-mode", "p", mode.value]).mode == mode.value
    with pytest.raises(SystemExit):
        parser.parse_args(["pool", "set-mode", "p", "sometimes"])


def _opa(query: str, input_doc: Any = None) -> Any:
    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    return opa.evaluate(query, input_doc or {}, {}, policies=POLICIES)


def test_opa_sees_the_same_sets() -> None:
    value = _opa('{"consent_modes": data.autoclusters.lib.pool_fields.pool_fields.settings.consentMode.values, '
                 '"fault_classes": data.autoclusters.lib.pools.fault_classes, '
                 '"class_actions": data.autoclusters.lib.pools.fault_class_actions, '
                 '"api": data.autoclusters.lib.api.api}')
    assert value["consent_modes"] == _values(ConsentMode)
    assert set(value["fault_classes"]) == set(_values(FaultClass))
    assert set(value["class_actions"]) == set(_values(ClassAction))
    assert value["api"] == api.rego_data()


def test_the_pool_policy_accepts_every_value_and_refuses_others() -> None:
    """The Rego applies its sets: every enum value passes, a value outside fails its rule, and
    a breaker setting left out takes the API's default (so it may not conflict with it)."""
    def rules(spec: dict[str, Any]) -> set[str]:
        obj = {"apiVersion": f"{Names().api_group}/{api.VERSION}", "kind": api.POOLS.kind,
               "metadata": {"name": "p"}, "spec": spec}
        return {v["rule"] for v in _opa("data.autoclusters.pools.violations", obj) or []}

    for mode in ConsentMode:
        assert rules({"consentMode": mode.value, "faultClasses": {c.value: ClassAction.DEFAULT.value
                                                                  for c in FaultClass}}) == set()
    for action in ClassAction:
        assert rules({"faultClasses": {c.value: action.value for c in FaultClass}}) == set()
    assert rules({"consentMode": "sometimes"}) == {"pool-consent-mode"}
    assert rules({"faultClasses": {"disk": "reset"}}) == {"pool-fault-class-action"}
    assert rules({"faultClasses": {"gpu": "reboot"}}) == {"pool-fault-class-action"}
    close = pool_fields.BREAKER_OPEN_ABOVE_PERCENT.default + 1  # only valid if open's default were higher
    assert rules({"circuitBreaker": {"closeBelowPercent": close}}) == {"pool-circuit-breaker"}
    assert rules({"circuitBreaker": {"openAbovePercent": pool_fields.BREAKER_CLOSE_BELOW_PERCENT.default - 1}}) == {
        "pool-circuit-breaker"}


# Where an API word stands for something else, or is sample data (path suffix -> words).
NOT_COPIES = {
    "cli/inject_fault.py": {"dcgm"}, "detector/dcgm.py": {"dcgm"}, "sim/hardware.py": {"dcgm"},  # the source
    "ops/snapshot.py": {"remediations"},  # a key of `status -o json`
    "components/__init__.py": {"GpuNodePool"},  # the component class's name
    "components/render.py": {"propose", "interconnect"},  # the example pools' values
    "providers/clusterapi.py": {"v1beta1"},  # a version of Cluster API's Machine, not of ours
}


def test_no_module_writes_the_api_words_again() -> None:
    """Kinds, plurals, version, the distinctive phase, mode and class names are written in
    api.py only; everything else uses its names (a string copy would not follow a change)."""
    root = POLICIES.parent
    phases = (Phase.AWAITING_APPROVAL, Phase.SCHEDULED, Phase.DRAINING, Phase.ACTING, Phase.VERIFYING,
              Phase.HUMAN_NEEDED)
    words = {api.POOLS.plural, api.REMEDIATIONS.plural, api.POOLS.kind, api.REMEDIATIONS.kind, api.VERSION,
             api.GROUP_PREFIX, ConsentMode.PROPOSE.value, *(p.value for p in phases),
             *(c.value for c in FaultClass if c != FaultClass.GPU)}
    found = []
    for top in ("autoclusters", "components", "examples"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == "autoclusters/api.py":
                continue
            tree = ast.parse(path.read_text())
            docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
            allowed = next((w for suffix, w in NOT_COPIES.items() if rel.endswith(suffix)), set())
            found += [f"{rel}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in words
                      and n.value not in allowed and id(n) not in docstrings]
    assert found == []


def test_the_pool_policy_checks_the_api_ranges() -> None:
    def rules(spec: dict[str, Any]) -> set[str]:
        obj = {"apiVersion": f"{Names().api_group}/{api.VERSION}", "kind": api.POOLS.kind,
               "metadata": {"name": "p"}, "spec": spec}
        return {v["rule"] for v in _opa("data.autoclusters.pools.violations", obj) or []}

    lim = pool_fields.MAX_CONCURRENT_REPAIRS
    assert lim.minimum is not None
    assert rules({"maxConcurrentRepairs": lim.minimum}) == set()
    assert rules({"maxConcurrentRepairs": lim.minimum - 1}) == {"pool-max-concurrent-repairs"}
    lim = pool_fields.PRE_DRAIN_WAIT_SECONDS
    assert lim.minimum is not None
    assert rules({"preDrain": {"waitSeconds": lim.minimum}}) == set()
    assert rules({"preDrain": {"waitSeconds": lim.minimum - 1}}) == {"pool-pre-drain"}
    top = pool_fields.BREAKER_OPEN_ABOVE_PERCENT.maximum
    assert top is not None
    assert rules({"circuitBreaker": {"openAbovePercent": top}}) == set()
    assert rules({"circuitBreaker": {"openAbovePercent": top + 1}}) == {"pool-circuit-breaker"}
