"""Valid and invalid pools generated from the pool's field table, each with the verdict it must get.

Every setting gets its limits and one step past each, values of the wrong type, and the rules
between settings both ways (with and without the other setting given, so the default counts);
every object of the spec that holds settings gets a value that is not an object, and a key it
does not know (the API server refuses it under strict field validation, kubectl's default). The parser
(tests/unit/rego/test_policy_data_pool_fields_parity.py), the Rego through ``opa eval`` (the same) and
the CRD schema in a real API server (tests/integration/test_pool_fields_crd.py) must each give
every case its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoclusters import pool_fields
from autoclusters.pool_fields import Excludes, Kind, NotAbove, Setting

HOOK_URL = "https://example.test/hook"  # a hook needs a url or a command


@dataclass(frozen=True)
class Case:
    name: str  # e.g. "drain.resetDeadlineSeconds=0"
    spec: dict[str, Any]
    valid: bool
    rule: str  # the policy rule that refuses it ("" for a valid case)
    field: str = ""  # the word a refusal names; default: the last key of the path the name starts with

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.name.split("=")[0].split(" ")[0].rsplit(".", 1)[-1])


def put(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``spec`` with ``value`` at the dotted ``path`` (and the url a hook needs)."""
    *parents, key = path.split(".")
    at = spec
    for part in parents:
        at = at.setdefault(part, {})
    at[key] = value
    if path.startswith("preDrain.hook.") or (path == "preDrain.hook" and isinstance(value, dict)):
        spec["preDrain"]["hook"].setdefault("url", HOOK_URL)
    return spec


def partner(setting: Setting) -> dict[str, Any]:
    """The other settings of a rule, set so that any valid value of ``setting`` keeps it."""
    spec: dict[str, Any] = {}
    for rule in pool_fields.RULES:
        if not isinstance(rule, NotAbove):
            continue  # an Excludes rule's other setting defaults to false
        if rule.lesser is setting:
            put(spec, rule.greater.path, rule.greater.maximum)
        elif rule.greater is setting:
            put(spec, rule.lesser.path, rule.lesser.minimum)
    return spec


def values_of(s: Setting) -> list[tuple[Any, bool]]:
    """(value, valid) for one setting: its limits, one step past each, the wrong types."""
    if s.kind == Kind.INTEGER:
        assert s.minimum is not None
        out = [(s.minimum, True), (s.default, True), (s.default + 1, True), (s.minimum - 1, False),
               (s.minimum + 0.5, False), (str(s.default), False), (True, False)]
        if s.maximum is not None:
            out += [(s.maximum, True), (s.maximum + 1, False)]
        return out
    if s.kind == Kind.BOOLEAN:
        return [(True, True), (False, True), ("true", False), (1, False)]
    if s.kind == Kind.ENUM:
        return [*((v, True) for v in s.values), ("sometimes", False), (s.values[-1].swapcase(), False),
                (False, False)]  # an unquoted YAML `off` reads as false
    return [([], True), (["slurm"], True), (["a", "b-1", "x" * 40], True), ("slurm", False), (["Slurm"], False),
            (["x" * 41], False), (["a", "a"], False), ([1], False), (["-a"], False)]


def cases() -> list[Case]:
    out: list[Case] = [Case("empty spec", {}, True, "")]
    for s in pool_fields.SETTINGS:
        for value, valid in values_of(s):
            out.append(Case(f"{s.path}={value!r}", put(partner(s), s.path, value), valid, "" if valid else s.rule))
    for rule in pool_fields.RULES:
        if isinstance(rule, Excludes):
            a, b = rule.first.path, rule.second.path
            out += [Case(f"{a} and {b} true", put(put({}, a, True), b, True), False, rule.rule),
                    Case(f"{a} true, {b} false", put(put({}, a, True), b, False), True, ""),
                    Case(f"{a} false, {b} true", put(put({}, a, False), b, True), True, "")]
            continue
        lo, hi = rule.lesser, rule.greater
        assert lo.minimum is not None and hi.maximum is not None
        out += [
            Case(f"{lo.path} == {hi.path}", put(put({}, lo.path, hi.default), hi.path, hi.default), True, ""),
            Case(f"{lo.path} > {hi.path}", put(put({}, lo.path, hi.default + 1), hi.path, hi.default), False,
                 rule.rule),
            Case(f"{lo.path} above {hi.path}'s default", put({}, lo.path, hi.default + 1), False, rule.rule),
            Case(f"{lo.path} at {hi.path}'s default", put({}, lo.path, hi.default), True, ""),
            Case(f"{hi.path} below {lo.path}'s default", put({}, hi.path, lo.default - 1), False, rule.rule),
        ]
    for group in pool_fields.groups():
        out += [Case(f"{group}={{}}", put({}, group, {}), True, ""),
                Case(f"{group}='x'", put({}, group, "x"), False, pool_fields.rule_of(group)),
                Case(f"{group}.unknownKey=1", put({}, f"{group}.unknownKey", 1), False, pool_fields.rule_of(group))]
    return out + structured()


def structured() -> list[Case]:
    """The structured parts the three check by their own code: the hook, the per-class actions,
    the repair codes."""
    def hook(h: dict[str, Any]) -> dict[str, Any]:
        return {"preDrain": {"hook": h}}

    pre, classes, codes = "pool-pre-drain", "pool-fault-class-action", "pool-repair-codes"
    return [
        Case("preDrain.hook.command=['/bin/x', '-v']", hook({"command": ["/bin/x", "-v"]}), True, ""),
        Case("preDrain.hook.url='http://x/y'", hook({"url": "http://x/y"}), True, ""),
        Case("preDrain.hook.url='ftp://x'", hook({"url": "ftp://x"}), False, pre),
        Case("preDrain.hook.url='https://a b'", hook({"url": "https://a b"}), False, pre),
        Case("preDrain.hook.url=''", hook({"url": ""}), False, pre),
        Case("preDrain.hook.url='' with a command", hook({"url": "", "command": ["x"]}), False, pre),
        Case("preDrain.hook.url=5", hook({"url": 5}), False, pre),
        Case("preDrain.hook.command=[]", hook({"command": []}), False, pre),
        Case("preDrain.hook.command=['']", hook({"command": [""]}), False, pre),
        Case("preDrain.hook.command='x'", hook({"command": "x"}), False, pre),
        Case("preDrain.hook with url and command", hook({"url": HOOK_URL, "command": ["x"]}), False, pre),
        Case("preDrain.hook with neither", hook({"timeoutSeconds": 5}), False, pre),
        Case("faultClasses.gpu='off'", {"faultClasses": {"gpu": "off"}}, True, ""),
        Case("faultClasses.gpu='reboot'", {"faultClasses": {"gpu": "reboot"}}, False, classes),
        Case("faultClasses.disk='reset'", {"faultClasses": {"disk": "reset"}}, False, classes),
        Case("repairCodes.gpu:13='reset'", {"repairCodes": {"gpu:13": "reset"}}, True, ""),
        Case("repairCodes.gpu:13='reboot'", {"repairCodes": {"gpu:13": "reboot"}}, False, codes, field="gpu:13"),
        Case("repairCodes.disk:1='reset'", {"repairCodes": {"disk:1": "reset"}}, False, codes, field="repairCodes"),
        *_selectors(),
        *_node_names(),
    ]


def _selectors() -> list[Case]:
    def sel(name: str, selector: Any, valid: bool, field: str = "nodeSelector") -> Case:
        return Case(f"nodeSelector {name}", {"nodeSelector": selector}, valid, "" if valid else "pool-node-selector",
                    field=field)

    def expr(**e: Any) -> dict[str, Any]:
        return {"matchExpressions": [e]}

    labels, exprs = "matchLabels", "matchExpressions"
    return [
        sel("of labels", {labels: {"gpu": "h100", "example.com/pool": "a-1"}}, True),
        sel("of an In", expr(key="gpu", operator="In", values=["h100", "b200"]), True),
        sel("of an Exists", expr(key="example.com/gpu", operator="Exists"), True),
        sel("of no labels and an expression", {labels: {}, **expr(key="gpu", operator="DoesNotExist")}, True),
        sel("empty", {}, False),
        sel("of empty parts", {labels: {}, exprs: []}, False),
        sel("not an object", "gpu=h100", False),
        sel("with an unknown key", {labels: {"gpu": "h100"}, "matchFields": []}, False, field="matchFields"),
        sel("with a bad label key", {labels: {"-gpu": "h100"}}, False, field=labels),
        sel("with a bad label value", {labels: {"gpu": "h 100"}}, False, field=labels),
        sel("with a label value too long", {labels: {"gpu": "x" * 64}}, False, field=labels),
        sel("of the most labels", {labels: {f"l{i}": "x" for i in range(pool_fields.SELECTOR_MAX_LABELS)}}, True),
        sel("of too many labels", {labels: {f"l{i}": "x" for i in range(pool_fields.SELECTOR_MAX_LABELS + 1)}}, False,
            field=labels),
        sel("with an operator it does not know", expr(key="gpu", operator="Gt", values=["1"]), False, field=exprs),
        sel("with an In without values", expr(key="gpu", operator="In"), False, field=exprs),
        sel("with an Exists with values", expr(key="gpu", operator="Exists", values=["x"]), False, field=exprs),
        sel("with an expression without a key", expr(operator="Exists"), False, field=exprs),
        sel("with a bad expression key", expr(key="gpu/", operator="Exists"), False, field=exprs),
        sel("with a bad expression value", expr(key="gpu", operator="In", values=["a b"]), False, field=exprs),
    ]


def _node_names() -> list[Case]:
    def named(name: str, mapping: Any, valid: bool) -> Case:
        return Case(f"slurm.nodeName {name}", {"slurm": {"nodeName": mapping}}, valid, "" if valid else "pool-slurm",
                    field="nodeName")

    return [
        named("from a label", {"fromLabel": "slurm.example.com/name"}, True),
        named("from an annotation", {"fromAnnotation": "slurm-name"}, True),
        named("from both", {"fromLabel": "a", "fromAnnotation": "b"}, False),
        named("from a bad key", {"fromLabel": "not a key"}, False),
        named("from an empty key", {"fromLabel": ""}, False),
        named("from an empty label and an annotation", {"fromLabel": "", "fromAnnotation": "b"}, False),
        named("with an unknown key", {"label": "a"}, False),
    ]
