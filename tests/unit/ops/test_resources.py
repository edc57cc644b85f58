import pytest

from autoclusters.kube.objects import selector_matches
from autoclusters.ops.resources import pool_reader
from tests.unit.builders import NAMES, node, pool


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


def test_pool_reader_is_the_membership_rule() -> None:
    pool_of, invalid = pool_reader([pool("y"), pool("z", selector={"matchLabels": {"t": "1"}})], NAMES)
    assert pool_of(node("n", "y", labels={"t": "1"})) == "y"
    assert pool_of(node("n", "x", labels={"t": "1"})) == "z"
    assert pool_of(node("n", "x")) == ""  # the label names no pool
    assert invalid == {}
