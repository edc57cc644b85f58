from autoclusters.kube.objects import condition, node_ready, selector_matches

LABELS = {"pool": "a100", "zone": "b"}


def test_match_labels_and_expressions_must_all_hold() -> None:
    assert selector_matches({"matchLabels": {"pool": "a100"},
                             "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, LABELS)
    assert not selector_matches({"matchLabels": {"pool": "a100"},
                                 "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}, LABELS)
    assert selector_matches({"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}, LABELS)
    assert not selector_matches({"matchExpressions": [{"key": "gone", "operator": "Exists"}]}, LABELS)


def test_empty_selector_selects_everything_and_a_bare_mapping_is_match_labels() -> None:
    assert selector_matches({}, LABELS)
    assert selector_matches({"pool": "a100"}, LABELS)
    assert not selector_matches({"pool": "h100"}, LABELS)


def test_an_unknown_operator_matches_nothing() -> None:
    assert not selector_matches({"matchExpressions": [{"key": "pool", "operator": "Like", "values": ["a"]}]}, LABELS)


def test_ready_and_conditions() -> None:
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}}
    assert node_ready(node)
    assert not node_ready({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})
    assert not node_ready(None) and not node_ready({})
    assert condition(node, "X") == {"type": "X", "status": "False"}
    assert condition(node, "Y") is None
