import pytest

from autoclusters.ops.resources import node_pool, pool_selector, selector_matches
from tests.unit.ops.builders import NAMES, node, pool


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"a": "1"}, {"a": "1"}, True),  # bare mapping read as matchLabels
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {"a": "5"}, False),
])
def test_selector_matches(selector: dict, labels: dict, expected: bool) -> None:
    assert selector_matches(selector, labels) is expected


def test_default_pool_selector_is_the_pool_label() -> None:
    assert pool_selector(pool("gpu-a"), NAMES) == {"matchLabels": {NAMES.pool_label: "gpu-a"}}


def test_node_pool_falls_back_to_the_label() -> None:
    assert node_pool(node("n", "x"), [pool("y")], NAMES) == "x"
    assert node_pool(node("n", ""), [pool("y")], NAMES) == ""
