"""The pools' Helm chart (components/pools_chart.py): its schema is the CRD's spec schema closed
to unknown keys, taking every pool the stack takes and refusing what the pool model refuses by
shape; its template is the builder's object with the value's name and spec. (``helm`` renders it
in tests/integration/test_helm_chart.py, installs and upgrades it in
tests/integration/test_real_nodes_helm.py.)"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from autoclusters.deploy.crds import pool_schema
from autoclusters.pools import default_pool
from autoclusters.pools.pool_config import _DNS_LABEL, PoolConfigError, pool_from_config
from components import chart, pools_chart
from components.render import EXAMPLE_POOLS, MANIFESTS


def _errors(schema: dict[str, Any], value: Any) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(value)]


def test_the_example_pools_pass_the_schema() -> None:
    schema = pools_chart.values_schema()
    assert _errors(schema, {"pools": EXAMPLE_POOLS}) == []


@pytest.mark.parametrize(("pool", "says"), [
    ({"name": "a", "consentmode": "auto"}, "consentmode"),  # misspelt: the CRD would prune it silently
    ({"name": "a", "consentMode": "sometimes"}, "sometimes"),
    ({"name": "a", "drain": {"resetDeadline": 1}}, "resetDeadline"),
    ({"consentMode": "auto"}, "name"),
    ({"name": "Not_A_Label"}, "Not_A_Label"),
])
def test_the_schema_refuses_what_the_pool_model_refuses_by_shape(pool: dict[str, Any], says: str) -> None:
    with pytest.raises(PoolConfigError):
        pool_from_config(pool) if says != "Not_A_Label" else _dns(pool["name"])
    errors = _errors(pools_chart.values_schema(), {"pools": [pool]})
    assert errors and any(says in e for e in errors), errors


def _dns(name: str) -> None:
    if not _DNS_LABEL.match(name):
        raise PoolConfigError(name)


def test_the_schema_is_the_crds_with_its_extensions_dropped() -> None:
    crd = pool_schema()["properties"]["spec"]
    item = pools_chart.pool_item_schema()
    assert set(item["properties"]) == {"name", *crd["properties"]}
    assert "x-kubernetes-validations" in json.dumps(crd) and "x-kubernetes-" not in json.dumps(item)
    assert item["properties"]["consentMode"]["enum"] == crd["properties"]["consentMode"]["enum"]


def test_the_default_policy_value_is_a_spec_without_the_pool_only_keys() -> None:
    key = next(k for k in chart.value_keys() if k.path == ("defaultPool",))
    assert not set(default_pool.NOT_ALLOWED) & set(key.schema["properties"])
    assert _errors(key.schema, {"consentMode": "off", "provider": {"type": "hostReboot"}}) == []
    assert _errors(key.schema, {"nodeSelector": {"matchLabels": {"a": "b"}}})


def test_the_template_is_the_builders_object_with_the_values_name_and_spec() -> None:
    """Beside its spec, a pool of the chart is manifests/pools/' object of the same name."""
    text = pools_chart.pool_template()
    assert text.count("{{- range $pool := .Values.pools }}") == 1
    assert 'spec: {{ toJson (omit $pool "name") }}' in text
    body = text.split("---\n", 1)[1].split("\nspec:", 1)[0].replace("{{ toJson $pool.name }}", "h100")
    shipped = yaml.safe_load((MANIFESTS / "pools" / "h100.yaml").read_text())
    assert yaml.safe_load(body) == {k: v for k, v in shipped.items() if k != "spec"}


def test_a_brand_names_its_own_api_group() -> None:
    text = pools_chart.pool_template({"domain": "crusoe.ai", "conditionPrefix": "Crusoe"})
    assert "apiVersion: remediation.crusoe.ai/" in text


def test_the_default_policy_json_is_the_form_helm_writes() -> None:
    """Sorted, compact and UTF-8, as Go's encoding/json (Helm's toJson) writes a map."""
    cm = default_pool.configmap({"consentMode": "off", "drain": {"resetDeadlineSeconds": 5}}, "ns")
    assert cm["data"][default_pool.KEY] == '{"consentMode":"off","drain":{"resetDeadlineSeconds":5}}'
