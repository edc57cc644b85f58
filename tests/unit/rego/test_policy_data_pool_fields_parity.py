"""The pool's field table (autoclusters/pool_fields.py) is the one source of a pool's settings:
the parser and the Rego (through the real ``opa eval``) give every generated pool the same
verdict (tests/integration/test_pool_fields_crd.py adds the CRD in a real API server), and the
CRD schema, the writer, the parsed defaults and the generated Rego data follow the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoclusters import api, pool_fields
from autoclusters.deploy.crds import pool_schema
from autoclusters.names import Names
from autoclusters.pools.allow_listed import listing
from autoclusters.pools.pool_config import PoolConfig, PoolConfigError, PreDrainHook, pool_from_config, pool_spec
from autoclusters.rego import opa
from autoclusters.rego.policy_data import PolicyConfig
from tests.conftest import tool_missing
from tests.unit.rego.pool_cases import HOOK_URL, Case, cases, partner, put, values_of

POLICIES = Path(__file__).resolve().parents[3] / "policies"
CASES = cases()


def _pool(case: Case) -> dict[str, Any]:
    return {"apiVersion": f"{Names().api_group}/{api.VERSION}", "kind": api.POOLS.kind,
            "metadata": {"name": "p"}, "spec": case.spec}


def _parser_error(case: Case) -> str:
    try:
        pool_from_config({"name": "p", **case.spec})
    except PoolConfigError as e:
        return str(e)
    return ""


def test_the_generated_rego_data_is_current() -> None:
    assert (POLICIES / "lib" / "pool_fields.rego").read_text() == pool_fields.rego_module(), (
        "policies/lib/pool_fields.rego is stale: run `make manifests`")


def test_the_cases_cover_every_setting_rule_and_object_both_ways() -> None:
    for s in pool_fields.SETTINGS:
        verdicts = {c.valid for c in CASES if c.name.startswith(f"{s.path}=")}
        assert verdicts == {True, False}, s.path
    for r in pool_fields.RULES:
        assert {c.valid for c in CASES if c.name.startswith(r.settings[0].path + " ")} == {True, False}
    for group in pool_fields.groups():
        assert {c.valid for c in CASES if c.name.startswith(f"{group}=")} == {True, False}
    assert any(c.name == "drain.resetDeadlineSeconds=0" and not c.valid for c in CASES)  # issue 27's case


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_parser_gives_each_case_its_verdict(case: Case) -> None:
    error = _parser_error(case)
    assert (error == "") == case.valid, error or "accepted"
    if error:
        assert case.field in error  # the message names the field


def test_opa_gives_every_case_the_parsers_verdict() -> None:
    try:
        opa.opa_binary()
    except opa.OpaError as e:
        tool_missing(str(e))
    # The shape is what the parser judges; the installation's operator lists every command and
    # URL the valid cases name (tests/unit/rego/test_allow_list_policy.py judges the lists).
    named = [f for c in CASES if c.valid for f in pool_from_config({"name": "p", **c.spec}).allow_listed()]
    data = PolicyConfig(allow_lists=listing(named)).data_document()
    found = opa.evaluate("[{v.rule | some v in data.autoclusters.lib.pools.pool_violations(p, "
                         "data.autoclusters.lib.config.config)} | some p in input]",
                         [_pool(c) for c in CASES], data, policies=POLICIES)
    wrong = []
    for case, rules in zip(CASES, found, strict=True):
        expected = set() if case.valid else {case.rule}
        parser = "accepts" if _parser_error(case) == "" else "refuses"
        if set(rules) != expected:
            wrong.append(f"{case.name}: rego {sorted(rules)}, expected {sorted(expected)} (the parser {parser})")
    assert wrong == []


def test_the_crd_schema_follows_the_table() -> None:
    spec = pool_schema()["properties"]["spec"]
    for s in pool_fields.SETTINGS:
        at = spec
        for part in s.path.split("."):
            at = at["properties"][part]
        assert at == s.schema(), s.path
    for r in pool_fields.RULES:
        at = spec
        for part in r.group.split(".") if r.group else []:
            at = at["properties"][part]
        assert r.cel() in at["x-kubernetes-validations"]


def test_every_setting_is_parsed_written_and_defaulted_from_the_table() -> None:
    """The parsed pool's attribute of each setting defaults to the table's default, and a
    value given reaches the written spec (so a setting added to the table but not to the
    model, or not written, fails here)."""
    written = pool_spec(PoolConfig("p", pre_drain=pool_from_config(
        {"name": "p", "preDrain": {"hook": {"url": HOOK_URL}}}).pre_drain))
    for s in pool_fields.SETTINGS:
        at: Any = written
        for part in s.path.split("."):
            at = at[part]
        assert at == s.written(s.default), s.path
        value = next(v for v, ok in values_of(s) if ok and v != s.written(s.default))
        out: Any = pool_spec(pool_from_config({"name": "p", **put(partner(s), s.path, value)}))
        for part in s.path.split("."):
            out = out[part]
        assert out == s.written(s.parse(value)), s.path
    assert PreDrainHook().timeout_seconds == pool_fields.PRE_DRAIN_HOOK_TIMEOUT_SECONDS.default


def test_a_rule_between_settings_is_one_declaration() -> None:
    """The CEL rule, the parser's message and the Rego data of a rule come from its declaration."""
    rule = pool_fields.RULES[0]
    assert rule.cel()["message"] == "closeBelowPercent must not exceed openAbovePercent"
    with pytest.raises(PoolConfigError, match=r"circuitBreaker\.closeBelowPercent \(31\) must not exceed "
                                              r"openAbovePercent \(30\)"):
        pool_from_config({"name": "p", "circuitBreaker": {"closeBelowPercent": 31}})
    assert pool_fields.rego_data()["not_above"] == [{"lesser": "circuitBreaker.closeBelowPercent",
                                                   "greater": "circuitBreaker.openAbovePercent",
                                                   "rule": "pool-circuit-breaker"}]


def test_docs_admission_lists_every_rule_of_the_table() -> None:
    text = (POLICIES.parent / "docs" / "admission.md").read_text()
    rules = {s.rule for s in pool_fields.SETTINGS} | {pool_fields.rule_of(g) for g in pool_fields.groups()} | {
        r.rule for r in pool_fields.RULES} | {c.rule for c in CASES if c.rule}
    assert [r for r in sorted(rules) if f"| `{r}` |" not in text] == []
