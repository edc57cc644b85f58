from datetime import UTC, datetime

import pytest

from autoclusters.ops.durations import DurationError, human_duration, parse_since
from autoclusters.ops.history import HistoryQuery, select_repairs
from autoclusters.ops.repairs import repair_from_object
from tests.unit.builders import NAMES, record

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _records() -> list[dict]:
    return [
        record("r2", "a-1", phase="Succeeded", outcome="Succeeded", created="2026-01-05T00:00:00Z",
               completed="2026-01-05T00:03:05Z", action="replace", replacement="a-9"),
        record("r1", "a-0", phase="Succeeded", outcome="Succeeded", created="2026-01-01T00:00:00Z",
               completed="2026-01-01T00:01:00Z"),
        record("r3", "b-0", "b", phase="AwaitingApproval", created="2026-01-09T23:00:00Z"),
    ]


def test_oldest_first_and_durations() -> None:
    rs = select_repairs(_records(), HistoryQuery())
    assert [r.name for r in rs] == ["r1", "r2", "r3"]
    assert rs[0].duration(NOW) == 60
    assert rs[1].duration(NOW) == 185
    assert rs[2].open and rs[2].duration(NOW) == 3600  # open: runs to now


def test_node_matches_the_repaired_node_and_its_replacement() -> None:
    assert [r.name for r in select_repairs(_records(), HistoryQuery(node="a-1"))] == ["r2"]
    assert [r.name for r in select_repairs(_records(), HistoryQuery(node="a-9"))] == ["r2"]
    assert select_repairs(_records(), HistoryQuery(node="nope")) == []


def test_pool_and_since_filters() -> None:
    assert [r.name for r in select_repairs(_records(), HistoryQuery(pool="b"))] == ["r3"]
    since = datetime(2026, 1, 3, tzinfo=UTC)
    assert [r.name for r in select_repairs(_records(), HistoryQuery(since=since))] == ["r2", "r3"]
    # an open repair is current whatever its start
    assert [r.name for r in select_repairs(_records(), HistoryQuery(since=NOW))] == ["r3"]


def test_reader_is_lenient_about_missing_fields() -> None:
    r = repair_from_object({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}})
    assert (r.node, r.phase, r.fault, r.started) == ("", "Pending", "", datetime(2026, 1, 1, tzinfo=UTC))
    assert r.open


def test_end_falls_back_to_the_last_step_of_a_finished_record() -> None:
    obj = record("r", "n", phase="NotNeeded", steps=[("AwaitingApproval", "2026-01-01T00:00:00Z", "proposed"),
                                                     ("NotNeeded", "2026-01-01T00:00:42Z", "cleared")])
    r = repair_from_object(obj)
    assert r.duration(NOW) == 42
    assert r.to_dict(NOW)["steps"][1] == {"phase": "NotNeeded", "time": "2026-01-01T00:00:42Z",
                                          "message": "cleared"}
    assert r.fault == "gpu:79"


@pytest.mark.parametrize(("text", "expected"), [
    ("90s", datetime(2026, 1, 9, 23, 58, 30, tzinfo=UTC)),
    ("24h", datetime(2026, 1, 9, tzinfo=UTC)),
    ("7d", datetime(2026, 1, 3, tzinfo=UTC)),
    ("1w", datetime(2026, 1, 3, tzinfo=UTC)),
    ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("2026-01-02", datetime(2026, 1, 2, tzinfo=UTC)),
])
def test_parse_since(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "5y", "", "-1h"])
def test_parse_since_rejects_nonsense(text: str) -> None:
    with pytest.raises(DurationError):
        parse_since(text, NOW)


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (0.4, "0s"), (42, "42s"), (185, "3m05s"),
                                               (8040, "2h14m"), (273600, "3d4h")])
def test_human_duration(seconds: float | None, text: str) -> None:
    assert human_duration(seconds) == text


def test_the_view_reads_what_the_controller_writes() -> None:
    from autoclusters.api import ConsentMode, Phase, RepairAction
    from autoclusters.controller.remediation_record import new_record, status_of
    from autoclusters.controller.statemachine import Fault, RepairState, TimelineStep

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
    state = RepairState(name="n1-abc", node="n1", pool="p", consent_mode=ConsentMode.PROPOSE,
                        fault=Fault("gpu", "79", "NvidiaXIDError", "Xid 79"), phase=Phase.SUCCEEDED,
                        action=RepairAction.REPLACE, escalated=True, outcome="Succeeded", replacement_node="n9",
                        created=t0, completed=t1, steps=(TimelineStep("Acting", t0, "replacing"),))
    obj = {**new_record(state, NAMES), "status": status_of(state)}
    r = repair_from_object(obj)
    assert (r.node, r.pool, r.consent_mode, r.action, r.fault, r.phase, r.outcome, r.replacement_node,
            r.escalated, r.started, r.completed) == ("n1", "p", "propose", "replace", "gpu:79", "Succeeded",
                                                     "Succeeded", "n9", True, t0, t1)
    assert not r.open and r.duration(NOW) == 120 and r.message == "replacing"


def test_a_record_the_reader_refuses_is_shown_not_raised() -> None:
    obj = record("r", "n", phase="Acting")
    obj["status"]["operation"] = {"action": "reset"}  # no id: not something this version wrote
    r = repair_from_object(obj)
    assert (r.node, r.phase, r.fault) == ("n", "Acting", "gpu:79")
    assert "not readable" in r.message and r.open
