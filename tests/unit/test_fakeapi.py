"""The fake API server follows the rules the controller's code depends on."""

from __future__ import annotations

import threading

import pytest

from autoclusters.kube import Conflict, Forbidden, Invalid, KubeError, NotFound
from autoclusters.kube.errors import Throttled, Unavailable
from tests.unit.fakeapi import Answer, ApiError, FakeApi


def _node(name: str = "n1") -> dict:
    return {"metadata": {"name": name, "labels": {"pool": "a"}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def test_versions_conflicts_and_missing_objects() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node())
    node = kube.get_node("n1")
    rv = node["metadata"]["resourceVersion"]
    assert kube.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})["metadata"]["resourceVersion"] != rv
    with pytest.raises(Conflict):  # a merge patch carrying the old resourceVersion
        kube.patch_node("n1", {"metadata": {"resourceVersion": rv, "labels": {"x": "2"}}})
    with pytest.raises(Invalid):  # a JSON patch whose `test` fails answers 422
        kube.patch_node("n1", [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                               {"op": "add", "path": "/spec/unschedulable", "value": True}],
                        "application/json-patch+json")
    with pytest.raises(NotFound):
        kube.get_node("n2")
    with pytest.raises(Conflict):
        kube.create("/api/v1/nodes", _node())
    same = kube.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})  # a no-op bumps nothing
    assert same["metadata"]["resourceVersion"] == kube.get_node("n1")["metadata"]["resourceVersion"]
    assert api.counts()[("PATCH", "nodes")] == 4 and api.counts()[("GET", "nodes")] == 3


def test_status_is_a_subresource_and_conditions_merge_by_type() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node())
    kube.patch_node("n1", {"status": {"conditions": []}, "spec": {"unschedulable": True}})
    assert kube.get_node("n1")["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    out = kube.patch_node_status("n1", {"status": {"conditions": [{"type": "Gpu", "status": "True"}]},
                                        "spec": {"unschedulable": False}})
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "Gpu"]
    assert out["spec"] == {"unschedulable": True}
    rec = kube.create("/apis/g/v1/things", {"metadata": {"name": "r"}, "spec": {"a": 1}, "status": {"b": 2}})
    assert "status" in rec  # only the custom resources with a status subresource drop it on create
    made = kube.create("/apis/g/v1/remediations", {"metadata": {"name": "r"}, "spec": {}, "status": {"b": 2}})
    assert "status" not in made


def test_selectors_evictions_and_the_request_log() -> None:
    api = FakeApi()
    kube = api.kube()
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        api.put("/api/v1/namespaces/ns/pods", {"metadata": {"name": name, "labels": {"app": name}},
                                               "spec": {"nodeName": node}})
    assert [p["metadata"]["name"] for p in kube.pods_on_node("n1")] == ["a", "b"]
    assert [p["metadata"]["name"] for p in kube.list_items("/api/v1/pods", label_selector="app!=a")] == ["b", "c"]
    api.pdb_blocked.add("ns/b")
    kube.evict("ns", "a")
    with pytest.raises(KubeError) as e:
        kube.evict("ns", "b")
    assert e.value.status == 429
    assert [p["metadata"]["name"] for p in kube.pods_on_node("n1")] == ["b"]
    assert [r.verb for r in api.requests] == ["LIST", "LIST", "POST", "POST", "LIST"]
    assert api.requests[2].resource == "pods/eviction"


def test_watch_streams_changes_and_expires_after_compaction() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node())
    _, rv = kube.list_with_version("/api/v1/nodes")
    seen: list[tuple[str, str]] = []

    def watch() -> None:
        for event in kube.watch("/api/v1/nodes", resource_version=rv, timeout_seconds=5):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 3:
                return

    t = threading.Thread(target=watch)
    t.start()
    api.put("/api/v1/nodes", _node("n2"))
    kube.patch_node("n1", {"metadata": {"labels": {"y": "1"}}})
    kube.delete("/api/v1/nodes/n2")
    t.join(5)
    assert seen == [("ADDED", "n2"), ("MODIFIED", "n1"), ("DELETED", "n2")]
    api.compact()
    with pytest.raises(KubeError) as gone:
        list(kube.watch("/api/v1/nodes", resource_version=rv, timeout_seconds=1))
    assert gone.value.status == 410
    api.close()


def test_a_failure_answers_the_next_matching_requests_before_or_after_acting() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node())
    api.fail_next("PATCH", "/api/v1/nodes", 503, times=2)
    for _ in range(2):
        with pytest.raises(Unavailable, match="injected HTTP 503"):
            kube.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    assert "x" not in kube.get_node("n1")["metadata"]["labels"]  # refused before anything was done
    kube.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})  # the third goes through
    api.fail_next("POST", "/api/v1/namespaces/default/events", 503, lands=True)
    with pytest.raises(Unavailable):
        kube.create("/api/v1/namespaces/default/events", {"metadata": {"name": "e1"}})
    assert api.read("/api/v1/namespaces/default/events/e1") is not None  # the write landed, its answer was lost
    kube.get_node("n1")  # a GET matches no PATCH failure


def test_a_hook_runs_before_the_matching_requests_only() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node())
    seen: list[str] = []
    api.on_request("PATCH", "/api/v1/nodes/n1", lambda req: seen.append(req.path))

    def refuse(req: object) -> None:
        raise ApiError(403, "admission webhook denied the request")

    api.on_request("DELETE", "/api/v1/nodes", refuse)
    kube.get_node("n1")
    kube.patch_node("n1", {"metadata": {"labels": {"x": "1"}}})
    assert seen == ["/api/v1/nodes/n1"]
    with pytest.raises(Forbidden, match="denied"):
        kube.delete("/api/v1/nodes/n1")
    assert api.read("/api/v1/nodes/n1") is not None


def test_changes_are_a_collections_history_in_order() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node("a"))
    kube.create("/api/v1/nodes", _node("b"))
    kube.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    api.remove("/api/v1/nodes/b")
    api.put("/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}})
    assert [(kind, o["metadata"]["name"]) for kind, o in api.changes("/api/v1/nodes")] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert [o["metadata"]["name"] for _, o in api.changes("/api/v1/namespaces/default/pods")] == ["p"]
    api.compact()
    assert api.changes("/api/v1/nodes") == []


def test_a_scripted_answer_stands_in_for_the_stores_once_and_in_order() -> None:
    api = FakeApi()
    kube = api.kube()
    kube.throttle_retries = 0
    api.put("/api/v1/nodes", _node("real"))
    api.answer_next("LIST", "/api/v1/nodes", Answer(body={"items": [_node("scripted")],
                                                          "metadata": {"resourceVersion": "7"}}))
    api.answer_next("LIST", "/api/v1/nodes", Answer(429, b"Too many requests\n", headers={"Retry-After": "3"}))
    api.answer_next("WATCH", "/api/v1/nodes", Answer(events=[{"type": "ADDED", "object": _node("w")}]))
    items, rv = kube.list_with_version("/api/v1/nodes")
    assert [o["metadata"]["name"] for o in items] == ["scripted"] and rv == "7"
    with pytest.raises(Throttled) as e:
        kube.list_items("/api/v1/nodes")
    assert e.value.retry_after == 3.0
    assert [ev["object"]["metadata"]["name"] for ev in kube.watch("/api/v1/nodes", resource_version="7")] == ["w"]
    assert api.scripted == 0
    assert [o["metadata"]["name"] for o in kube.list_items("/api/v1/nodes")] == ["real"]  # the store's again


def test_an_after_hook_changes_the_store_after_the_snapshot_it_answers() -> None:
    api = FakeApi()
    kube = api.kube()
    api.put("/api/v1/nodes", _node("a"))
    api.on_request("LIST", "/api/v1/nodes", lambda req: api.put("/api/v1/nodes", _node("late")), after=True)
    assert [o["metadata"]["name"] for o in kube.list_items("/api/v1/nodes")] == ["a"]  # the snapshot before it
    assert api.read("/api/v1/nodes/late") is not None
