from types import SimpleNamespace
from typing import Any

import pytest

from autoclusters.kube import Conflict, Invalid, Kube


class RacingKube(Kube):
    """A Kube whose node is changed by someone else ``lose`` times before our patch lands."""

    def __init__(self, lose: int) -> None:
        super().__init__(SimpleNamespace(configuration=SimpleNamespace(host="x"), user_agent=""))
        self.lose = lose
        self.rv = 1
        self.patches: list[list[dict[str, Any]]] = []

    def get_node(self, name: str, *, timeout: float = 30) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": str(self.rv), "labels": {"seen": str(self.rv)}}}

    def patch_node(self, name: str, body: Any, patch_type: str = "") -> dict[str, Any]:
        self.patches.append(body)
        if body[0] != {"op": "test", "path": "/metadata/resourceVersion", "value": str(self.rv)}:
            raise Conflict("stale")
        if self.lose:
            self.lose -= 1
            self.rv += 1  # a concurrent writer got there first
            raise Invalid("the server rejected our request due to an error in our request")
        return {"metadata": {"name": name, "resourceVersion": str(self.rv + 1)}}


def ops_from(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/metadata/labels/mine", "value": node["metadata"]["labels"]["seen"]}]


def test_a_lost_race_is_retried_with_operations_computed_from_the_fresh_node() -> None:
    kube = RacingKube(lose=2)
    out = kube.patch_node_guarded(kube.get_node("n"), ops_from)
    assert out["metadata"]["resourceVersion"] == "4"
    assert [p[1]["value"] for p in kube.patches] == ["1", "2", "3"]


def test_nothing_to_do_sends_nothing() -> None:
    kube = RacingKube(lose=0)
    node = kube.get_node("n")
    assert kube.patch_node_guarded(node, lambda _: []) is node
    assert kube.patches == []


def test_endless_races_give_up_with_conflict() -> None:
    kube = RacingKube(lose=100)
    with pytest.raises(Conflict, match="concurrent writers"):
        kube.patch_node_guarded(kube.get_node("n"), ops_from, attempts=3)
    assert len(kube.patches) == 3


def test_a_refusal_that_is_not_a_failed_test_is_not_a_race() -> None:
    """A 422 from an admission policy (or an invalid patch) is raised at once: reading the node
    again and retrying would only repeat it (and say "concurrent writers", which is not true)."""

    class Refusing(RacingKube):
        def patch_node(self, name: str, body: Any, patch_type: str = "") -> dict[str, Any]:
            self.patches.append(body)
            raise Invalid("ValidatingAdmissionPolicy 'labels' denied request: maintenance labels are ours")

    kube = Refusing(lose=0)
    with pytest.raises(Invalid, match="denied request"):
        kube.patch_node_guarded(kube.get_node("n"), ops_from)
    assert len(kube.patches) == 1


def test_what_counts_as_a_lost_race() -> None:
    from autoclusters.kube import NotFound
    from autoclusters.kube.errors import lost_race

    assert lost_race(Conflict("the object has been modified"))
    assert lost_race(Invalid("the server rejected our request due to an error in our request"))  # the API server's
    assert lost_race(Invalid("testing value /metadata/resourceVersion failed: test failed"))
    assert lost_race(Invalid("test operation does not apply: is missing path: /spec/taints/1"))
    assert not lost_race(Invalid("spec.taints[0].effect: Unsupported value"))
    assert not lost_race(NotFound('remediations "r" not found'))
