from typing import Any

import pytest

from autoclusters.kube import Conflict, Invalid, Kube
from tests.unit.builders import node
from tests.unit.fakeapi import ApiError, FakeApi, Request


def racing(lose: int) -> tuple[FakeApi, Kube]:
    """Node ``n``, which another writer changes just before each of our first ``lose`` patches
    lands (its label ``seen`` counts those writes)."""
    api = FakeApi()
    api.put("/api/v1/nodes", node("n", pool="", detected=False, labels={"seen": "0"}))
    left = [lose]

    def another_writer(req: Request) -> None:
        if left[0]:
            left[0] -= 1
            api.edit("/api/v1/nodes/n", lambda n: n["metadata"]["labels"].update(
                seen=str(int(n["metadata"]["labels"]["seen"]) + 1)))

    api.on_request("PATCH", "/api/v1/nodes/n", another_writer)
    return api, api.kube()


def patches(api: FakeApi) -> list[list[dict[str, Any]]]:
    return [r.body for r in api.requests if r.verb == "PATCH"]


def ops_from(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/metadata/labels/mine", "value": node["metadata"]["labels"]["seen"]}]


def test_a_lost_race_is_retried_with_operations_computed_from_the_fresh_node() -> None:
    api, kube = racing(lose=2)
    out = kube.patch_node_guarded(kube.get_node("n"), ops_from)
    assert out["metadata"]["labels"] == {"seen": "2", "mine": "2"}
    assert out["metadata"]["resourceVersion"] == (api.read("/api/v1/nodes/n") or {})["metadata"]["resourceVersion"]
    assert [p[1]["value"] for p in patches(api)] == ["0", "1", "2"]
    assert all(p[0]["path"] == "/metadata/resourceVersion" for p in patches(api))  # the guard goes first


def test_nothing_to_do_sends_nothing() -> None:
    api, kube = racing(lose=0)
    node = kube.get_node("n")
    assert kube.patch_node_guarded(node, lambda _: []) is node
    assert patches(api) == []


def test_endless_races_give_up_with_conflict() -> None:
    api, kube = racing(lose=100)
    with pytest.raises(Conflict, match="concurrent writers"):
        kube.patch_node_guarded(kube.get_node("n"), ops_from, attempts=3)
    assert len(patches(api)) == 3
    assert "mine" not in (api.read("/api/v1/nodes/n") or {})["metadata"]["labels"]


def test_a_refusal_that_is_not_a_failed_test_is_not_a_race() -> None:
    """A 422 from an admission policy (or an invalid patch) is raised at once: reading the node
    again and retrying would only repeat it (and say "concurrent writers", which is not true)."""
    api, kube = racing(lose=0)

    def admission(req: Request) -> None:
        raise ApiError(422, "ValidatingAdmissionPolicy 'labels' denied request: maintenance labels are ours")

    api.on_request("PATCH", "/api/v1/nodes/n", admission)
    with pytest.raises(Invalid, match="denied request"):
        kube.patch_node_guarded(kube.get_node("n"), ops_from)
    assert len(patches(api)) == 1


def test_what_counts_as_a_lost_race() -> None:
    from autoclusters.kube import NotFound
    from autoclusters.kube.errors import lost_race

    assert lost_race(Conflict("the object has been modified"))
    assert lost_race(Invalid("the server rejected our request due to an error in our request"))  # the API server's
    assert lost_race(Invalid("testing value /metadata/resourceVersion failed: test failed"))
    assert lost_race(Invalid("test operation does not apply: is missing path: /spec/taints/1"))
    assert not lost_race(Invalid("spec.taints[0].effect: Unsupported value"))
    assert not lost_race(NotFound('remediations "r" not found'))
