"""Which new nodes may replace a node: created in a later second than the repair's bound
(creationTimestamp has whole seconds, so the bound's own second is ambiguous)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from autoclusters.api import RepairAction
from autoclusters.clock import utc_iso
from autoclusters.names import Names
from autoclusters.providers.replacement import ReplacementClaims
from autoclusters.providers.types import Operation
from tests.unit import builders

NAMES = Names()
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _node(name: str, created: datetime, **annotations: str) -> dict[str, Any]:
    return builders.node(name, pool="", detected=False, created=utc_iso(created), annotations=annotations)


def _names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def test_a_node_made_in_the_operations_start_second_is_not_its_replacement() -> None:
    """The operation starts 0.6 s into a second; a node of the pool made 0.3 s into that second
    (before the start) reads as created at the start's whole second. Before the fix it was a
    candidate (created >= the start truncated to the second) and could be claimed."""
    claims = ReplacementClaims(object(), NAMES)  # type: ignore[arg-type]  # candidates make no call
    op = Operation("rec-1", RepairAction.REPLACE, T0 + timedelta(milliseconds=600))
    nodes = [_node("old", T0 - timedelta(hours=1)), _node("just-before", T0 + timedelta(milliseconds=300)),
             _node("next-second", T0 + timedelta(seconds=1)), _node("later", T0 + timedelta(seconds=30))]
    assert _names(claims.candidates(op, "old", nodes)) == ["next-second", "later"]


def test_the_bound_is_the_mark_when_it_came_before_the_operation() -> None:
    """The mark (whole seconds) is the bound: a node of the mark's second is not a candidate,
    one of the next second is, even though it came before the operation started."""
    claims = ReplacementClaims(object(), NAMES)  # type: ignore[arg-type]
    marked = T0 - timedelta(seconds=20)
    old = _node("old", T0 - timedelta(hours=1), **{NAMES.marked_at_annotation: utc_iso(marked)})
    op = Operation("rec-1", RepairAction.REPLACE, T0)
    claims.since(op, old)
    nodes = [_node("mark-second", marked), _node("during-drain", marked + timedelta(seconds=1))]
    assert _names(claims.candidates(op, "old", nodes)) == ["during-drain"]
