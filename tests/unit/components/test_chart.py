"""The Helm chart's generator (components/chart.py): the values cover the declared settings,
each sentinel passes the Python validation, the sentinel mapping turns each kind of difference
into its template form, a difference it cannot express is refused, and the schema says the
declarations' types. (``helm`` itself runs in tests/integration/test_helm_chart.py; the
chart's drift is ``components.render --check``, tests/unit/components/test_render_manifests.py.)"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml

from autoclusters import api
from autoclusters.deploy.controller_flags import TUNABLES
from autoclusters.deploy.pod_settings import COMPONENTS, SETTINGS
from autoclusters.deploy.stack_config import STACK_SETTINGS, StackConfig, stack_config_from_dict
from components import chart
from components.chart import Ctl, Expr, TDict, TList, Unmappable, ValueKey, _Converter, _diff, emit, template_tree
from components.chart import merged_template as merged


@pytest.fixture(scope="module")
def default_chart() -> dict[str, str]:
    """The chart's files (a few seconds: the sentinel render once per combination of the variants)."""
    return chart.render_chart()


def _key(path: tuple[str, ...], default: Any = None, schema: dict[str, Any] | None = None) -> ValueKey:
    return ValueKey(path, schema or {"type": "string"}, lambda t: t, "doc", default)


def test_the_values_cover_every_pod_setting_and_controller_flag() -> None:
    paths = {k.path for k in chart.value_keys()}
    assert {("pods", part, s.key) for part in COMPONENTS for s in SETTINGS} <= paths
    assert {("controller", name) for name in TUNABLES} <= paths


def test_every_stack_setting_is_a_value_or_said_left_out() -> None:
    tops = {k.path[0] for k in chart.value_keys()} | {"pods", "controller"}
    left = {name.strip() for entry in chart.LEFT_OUT for name in entry.split(",")}
    left |= {part.split(".")[0] for part in left}
    assert set(STACK_SETTINGS) <= tops | left


@pytest.mark.parametrize("key", chart.value_keys(), ids=lambda k: k.dotted)
def test_every_sentinel_passes_the_python_validation(key: ValueKey) -> None:
    stack_config_from_dict(chart.nest(key.path, key.sentinel(chart._token(key.path))))


def test_a_scalar_with_the_value_inside_becomes_a_print() -> None:
    key = _key(("image",), default="img:1")
    conv = _Converter(key, "zzt", "zzt")
    edits = list(_diff(conv, {"a": "'img:1'"}, {"a": "'zzt'"}, ()))
    assert [(p, e.kind) for p, e in edits] == [(("a",), "scalar")]
    tree = template_tree({"a": "'img:1'"}, edits)
    assert emit(tree, 0) == ['a: {{ print "\'" (index $.Values "image") "\'" | toJson }}']


def test_a_scalar_of_a_key_without_default_keeps_the_default_unless_set() -> None:
    key = _key(("pods", "detector", "priorityClassName"))
    edits = list(_diff(_Converter(key, "zzt", "zzt"), {"p": "system"}, {"p": "zzt"}, ()))
    line = emit(template_tree({"p": "system"}, edits), 0)[0]
    assert line.startswith('p: {{ if (index $.Values "pods" "detector" "priorityClassName") }}')
    assert line.endswith('{{ else }}"system"{{ end }}')


def test_list_items_of_a_list_value_become_a_range_and_flags_a_condition() -> None:
    tol = _key(("pods", "x", "tolerations"), schema={"type": "array"})
    value = [{"key": "zzt"}]
    edits = list(_diff(_Converter(tol, "zzt", value), {"t": [{"key": "a"}]}, {"t": [{"key": "a"}, *value]}, ()))
    (path, edit), = edits
    assert path == ("t",) and edit.kind == "items" and edit.index == 1
    assert edit.node == [Ctl('{{- range $it := (index $.Values "pods" "x" "tolerations") }}'),
                         Expr("{{ toJson $it }}"), Ctl("{{- end }}")]
    workers = _key(("controller", "workers"), schema={"type": "integer"})
    (_, flag), = _diff(_Converter(workers, "zzt", 97531), {"args": ["run"]}, {"args": ["run", "--w", "97531"]}, ())
    tree = template_tree({"args": ["run"]}, [(("args",), flag)])
    assert isinstance(tree, TDict) and isinstance(tree.entries[0], tuple)
    assert emit(tree, 0) == ["args:", '  - "run"', '  {{- if hasKey (index $.Values "controller") "workers" }}',
                             '  - "--w"', '  - {{ print "" ((index $.Values "controller" "workers") | toString) "" '
                             '| toJson }}', "  {{- end }}"]


def test_map_entries_merge_by_range_and_a_whole_map_replaces() -> None:
    ann = _key(("pods", "x", "podAnnotations"), schema={"type": "object"})
    value = {"zzt": "zztv"}
    (_, merged), = _diff(_Converter(ann, "zzt", value), {"m": {"a": "1"}}, {"m": {"a": "1", **value}}, ())
    assert merged.kind == "keys" and isinstance(merged.node[0], Ctl) and merged.node[0].text.startswith("{{- range $k")
    res = _key(("pods", "x", "resources"), schema={"type": "object"})
    limits: dict[str, Any] = {"limits": {"zzt": "zztv"}}
    (_, replaced), = _diff(_Converter(res, "zzt", limits), {"r": {"requests": {"cpu": "1"}}}, {"r": limits}, ())
    assert replaced.kind == "replace"


def test_a_difference_that_is_not_the_value_is_refused() -> None:
    key = _key(("nvml", "enabled"), schema={"type": "boolean"})
    with pytest.raises(Unmappable):
        list(_diff(_Converter(key, "zzt", False), {"args": ["--a", "b"]}, {"args": ["--no"]}, ()))
    with pytest.raises(Unmappable):
        list(_diff(_Converter(key, "zzt", False), {"v": {"a": 1, "b": 2}}, {"v": {"a": 1}}, ()))


def test_literal_braces_are_escaped_and_odd_keys_quoted() -> None:
    lines = emit(TDict([("a", "{{x}}"), ("on", 1), ("b", TList([]))]), 0)
    assert lines == ['a: "{{ "{{" }}x}}"', '"on": 1', "b: []"]


def test_the_schema_refuses_unknown_keys_and_says_the_types() -> None:
    schema = chart.values_schema(chart.value_keys())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["controller"]["additionalProperties"] is False
    assert schema["properties"]["controller"]["properties"]["workers"]["type"] == "integer"
    assert schema["properties"]["pods"]["properties"]["detector"]["additionalProperties"] is False


def test_values_yaml_holds_the_defaults() -> None:
    values = yaml.safe_load(chart.values_yaml(chart.value_keys()))
    assert values["image"] == chart._DEFAULTS.image
    assert values["nvml"]["search"] == list(chart.DEFAULT_SEARCH)
    assert set(values["pods"]) == set(COMPONENTS)


def test_a_chart_of_ones_own_takes_the_render_time_settings_and_leaves_the_values_to_helm(
        default_chart: dict[str, str]) -> None:
    """``components.render --config ... --out DIR`` writes DIR/chart from the settings that are
    not values (a reboot command, a domain); the values' keys stay values (the variants' too),
    and pools stay out."""
    from components.chart import render_chart, render_time_settings
    config = {"hostRebootCommand": "/usr/local/bin/test-reboot now", "image": "x/y:1",
              "pods": {"controller": {"priorityClassName": "p"}}, "nvml": {"enabled": False, "hostRoot": "/h"},
              "kernelLogSource": "journal", "monitoring": {"prometheusOperator": True, "approvalWaitAlertSeconds": 60},
              "pools": [{"name": "a"}]}
    assert render_time_settings(config) == {"hostRebootCommand": "/usr/local/bin/test-reboot now",
                                            "monitoring": {"approvalWaitAlertSeconds": 60}}
    own, default = render_chart(config), default_chart
    assert "test-reboot" in "".join(own.values()) and "test-reboot" not in "".join(default.values())
    assert own["values.yaml"] == default["values.yaml"]  # the same values, the same defaults
    assert not any("kind: GpuNodePool" in text for text in own.values())
    assert "has waited over 1 minute" in own["templates/prometheus-operator.yaml"]
    assert "has waited over 1 minute" not in default["templates/prometheus-operator.yaml"]


# --- the variants --------------------------------------------------------------------------------

def _variant(path: tuple[str, ...], choices: tuple[Any, ...]) -> tuple[ValueKey, tuple[Any, ...]]:
    key = chart._variant(path, choices[0], choices, "doc")
    return key, key.choices


SOURCE, NVML = _variant(("kernelLogSource",), ("kmsg", "journal")), _variant(("nvml", "enabled"), (True, False))
DIMS = (SOURCE, NVML)
COMBOS = list(itertools.product(SOURCE[1], NVML[1]))
IS_JOURNAL = 'eq (include "autoclusters.value.kernelLogSource" $) "journal"'
IS_KMSG = 'eq (include "autoclusters.value.kernelLogSource" $) "kmsg"'
NVML_OFF = 'eq (include "autoclusters.value.nvml.enabled" $) "false"'
NVML_ON = 'eq (include "autoclusters.value.nvml.enabled" $) "true"'


def test_the_variants_are_the_stack_settings_choices_with_its_defaults_first() -> None:
    variants = {k.dotted: k for k in chart.variants(chart.value_keys())}
    assert set(variants) == {"kernelLogSource", "nvml.enabled", "monitoring.prometheusOperator"}
    assert variants["kernelLogSource"].choices == tuple(s.value for s in api.DAEMONSET_KERNEL_LOG_SOURCES)
    assert variants["kernelLogSource"].schema == {"type": "string", "enum": ["kmsg", "journal"]}
    assert variants["nvml.enabled"].schema == {"type": "boolean"}
    defaults = StackConfig()
    assert [k.default for k in variants.values()] == [
        defaults.kernel_log_source.value, defaults.nvml.enabled, defaults.monitoring.prometheus_operator]
    assert all(k.choices[0] == k.default for k in variants.values())
    for key in chart.value_keys():  # what a key needs is a variant's choice
        assert all(variants[".".join(path)].choices.count(value) == 1 for path, value in key.needs)


def test_an_object_the_same_in_every_combination_is_written_as_it_is() -> None:
    assert merged(DIMS, dict.fromkeys(COMBOS, "a: 1\n")) == "a: 1\n"


def test_an_object_branches_on_only_the_variants_its_text_depends_on() -> None:
    texts = {(source, on): f"a: {source}\n" for source, on in COMBOS}
    assert merged(DIMS, texts) == (
        f"{{{{- if {IS_KMSG} }}}}\na: kmsg\n{{{{- else }}}}\na: journal\n{{{{- end }}}}\n")


def test_an_object_of_some_combinations_is_under_their_condition_without_else() -> None:
    texts = {(source, on): "kind: X\n" for source, on in COMBOS if not on}
    assert merged(DIMS, texts) == f"{{{{- if {NVML_OFF} }}}}\nkind: X\n{{{{- end }}}}\n"
    texts = {(source, on): "kind: X\n" for source, on in COMBOS if not on and source == "journal"}
    assert merged(DIMS, texts).startswith(f"{{{{- if and ({IS_JOURNAL}) ({NVML_OFF}) }}}}\n")


def test_a_group_that_is_no_product_of_cases_has_a_term_per_combination() -> None:
    texts = {(source, on): "a\n" if (source == "kmsg") == on else "b\n" for source, on in COMBOS}
    assert merged(DIMS, texts) == (
        f"{{{{- if or (and ({IS_KMSG}) ({NVML_ON})) (and ({IS_JOURNAL}) ({NVML_OFF})) }}}}\na\n"
        "{{- else }}\nb\n{{- end }}\n")


def test_a_split_key_tells_its_default_from_any_other_value() -> None:
    root = ValueKey(("nvml", "hostRoot"), {"type": "string"}, lambda t: "/" + t, "doc", "/", split=True)
    out = merged(((root, ("/", chart.ANY_OTHER)),), {("/",): "a\n", (chart.ANY_OTHER,): "b\n"})
    assert out == '{{- if eq (include "autoclusters.value.nvml.hostRoot" $) "/" }}\na\n{{- else }}\nb\n{{- end }}\n'
    # an unset key (helm upgrade --reuse-values from a chart without it) reads as its default
    tpl = chart.value_templates([root, NVML[0]])
    assert '{{- $v := index (default (dict) (index $.Values "nvml")) "hostRoot" -}}' in tpl
    assert '{{- if kindIs "invalid" $v }}true{{ else }}{{ $v }}{{ end -}}' in tpl


def test_the_chart_branches_the_detector_and_the_prometheus_operators_objects_only(
        default_chart: dict[str, str]) -> None:
    branched = {name for name, text in default_chart.items() if "autoclusters.value." in text}
    assert branched == {"templates/_values.tpl", "templates/detector.yaml", "templates/prometheus-operator.yaml"}
    monitors = default_chart["templates/prometheus-operator.yaml"]
    assert monitors.count('{{- if eq (include "autoclusters.value.monitoring.prometheusOperator" $) "true" }}') == 4
    assert "kernelLogSource" not in monitors and "nvml" not in monitors
    detector = default_chart["templates/detector.yaml"]
    assert detector.count("kind: \"DaemonSet\"") == 5  # kmsg and journal, with NVML or not; journal's split on "/"
    assert 'eq (include "autoclusters.value.nvml.hostRoot" $) "/"' in detector
