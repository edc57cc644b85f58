"""The narrow guards of a JSON patch: each test names what it protects against, and the patch is
applied (with the ``jsonpatch`` library) to the object another writer changed, to show the
guard holds or fails where it should."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from autoclusters.kube.json_patch import field_tests, pointer, resolve

TAINT = {"key": "example.com/maint", "value": "true", "effect": "PreferNoSchedule"}


def node() -> dict[str, Any]:
    return {"metadata": {"name": "n1", "resourceVersion": "7", "labels": {"pool": "a", "a/b": "x"},
                         "annotations": {"keep": "1"}},
            "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def applies(doc: dict[str, Any], patch: list[dict[str, Any]]) -> bool:
    try:
        jsonpatch.apply_patch(doc, patch)
    except (jsonpatch.JsonPatchConflict, jsonpatch.JsonPatchTestFailed):
        return False
    return True


def test_pointer_and_resolve_escape_slashes_and_tildes() -> None:
    doc = node()
    assert pointer("a/b") == "a~1b" and pointer("x~y") == "x~0y"
    assert resolve(doc, "/metadata/labels/" + pointer("a/b")) == "x"
    assert resolve(doc, "/spec/taints/0/key") == "other"
    assert resolve(doc, "/spec/taints/3") is resolve(doc, "/nope")  # both missing


def test_adding_label_and_cordon_needs_no_test_so_a_heartbeat_in_between_does_not_fail_it() -> None:
    doc = node()
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/metadata/labels/maint", "value": "true"},
           {"op": "add", "path": "/spec/unschedulable", "value": True}]
    tests = field_tests(doc, ops)
    assert tests == []
    later = copy.deepcopy(doc)
    later["status"]["conditions"][0]["lastHeartbeatTime"] = "now"
    later["metadata"]["resourceVersion"] = "8"
    later["metadata"]["annotations"]["another-controller"] = "y"
    assert applies(later, [*tests, *ops])


def test_appending_a_taint_tests_the_list_so_nothing_is_doubled_or_lost() -> None:
    doc = node()
    ops = [{"op": "add", "path": "/spec/taints/-", "value": TAINT}]
    tests = field_tests(doc, ops)
    assert tests == [{"op": "test", "path": "/spec/taints", "value": doc["spec"]["taints"]}]
    ours_meanwhile = copy.deepcopy(doc)
    ours_meanwhile["spec"]["taints"].append(TAINT)  # another replica marked it first
    assert not applies(ours_meanwhile, [*tests, *ops])
    status_only = copy.deepcopy(doc)
    status_only["status"]["conditions"].append({"type": "GpuHealthy", "status": "False"})
    assert applies(status_only, [*tests, *ops])


def test_a_removal_tests_the_value_it_removes() -> None:
    doc = node()
    ops = [{"op": "remove", "path": "/metadata/labels/pool"}, {"op": "remove", "path": "/spec/taints/0"}]
    tests = field_tests(doc, ops)
    assert tests == [{"op": "test", "path": "/metadata/labels/pool", "value": "a"},
                     {"op": "test", "path": "/spec/taints/0", "value": {"key": "other", "effect": "NoSchedule"}}]
    relabelled = copy.deepcopy(doc)
    relabelled["metadata"]["labels"]["pool"] = "b"  # someone moved it to another pool meanwhile
    assert not applies(relabelled, [*tests, *ops])


def test_the_callers_own_test_stays_and_is_not_repeated() -> None:
    doc = node()
    own = {"op": "test", "path": "/spec/taints/0", "value": doc["spec"]["taints"][0]}
    ops = [own, {"op": "remove", "path": "/spec/taints/0"}]
    assert field_tests(doc, ops) == []


@pytest.mark.parametrize("ops", [
    [{"op": "add", "path": "/metadata/finalizers", "value": ["x"]}],  # a new list: absence cannot be tested
    [{"op": "add", "path": "/spec/podCIDRs/-", "value": "10.0.0.0/24"}],  # into a list that is not there
    [{"op": "remove", "path": "/metadata/labels/absent"}],
    [{"op": "move", "from": "/metadata/labels/pool", "path": "/metadata/labels/p"}],
])
def test_what_cannot_be_tested_field_by_field_asks_for_the_whole_object(ops: list[dict[str, Any]]) -> None:
    assert field_tests(node(), ops) is None


def test_replacing_an_existing_map_tests_it() -> None:
    doc = node()
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"mine": "1"}}]
    assert field_tests(doc, ops) == [{"op": "test", "path": "/metadata/annotations", "value": {"keep": "1"}}]


def test_a_karpenter_guard_a_user_adds_meanwhile_stays_the_users() -> None:
    """The marking adds Karpenter's do-not-disrupt and records it as ours only when it was absent:
    a user who sets it between our read and our patch fails the annotations' test, and the patch
    computed again leaves theirs alone (it is not in our marker, so unmarking keeps it)."""
    from autoclusters.clock import FakeClock
    from autoclusters.controller.actuator import Actuator
    from autoclusters.providers.karpenter import DO_NOT_DISRUPT, NODEPOOL_LABEL
    from tests.unit.controller.harness import NAMES, Notes
    from tests.unit.fakeapi import FakeApi, Request

    api = FakeApi()
    kube = api.kube()
    read = api.put("/api/v1/nodes", {"metadata": {"name": "n1", "labels": {NODEPOOL_LABEL: "gpu"},
                                                  "annotations": {"x": "1"}},
                                     "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}})
    users: list[str] = []

    def user_first(req: Request) -> None:
        if req.verb == "PATCH" and not users:
            users.append(req.path)
            api.edit("/api/v1/nodes/n1", lambda n: n["metadata"]["annotations"].update({DO_NOT_DISRUPT: "true"}))

    api.before.append(user_first)
    act = Actuator(kube, NAMES, None, Notes(), FakeClock())  # type: ignore[arg-type]  # no event here
    out = act.ensure_marked(read, cordon=True)
    ann = out["metadata"]["annotations"]
    assert users and ann[DO_NOT_DISRUPT] == "true"
    assert DO_NOT_DISRUPT not in ann[NAMES.karpenter_guard_marker].split(",")
    assert [(r.verb, r.resource) for r in api.requests] == [("PATCH", "nodes"), ("GET", "nodes"), ("PATCH", "nodes")]
    cleaned = act.unmark(out, uncordon=True)
    assert cleaned["metadata"]["annotations"][DO_NOT_DISRUPT] == "true"  # the user's own stays
