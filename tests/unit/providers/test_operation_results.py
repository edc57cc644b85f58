"""The providers' per-operation results: one start per operation, results reported, and the
finished ones bounded (a controller's months of repairs must not stay in memory)."""

from __future__ import annotations

import pytest

from autoclusters.providers.operation_results import OperationResults


def test_an_operation_starts_once_and_reports_its_result() -> None:
    results: OperationResults[str] = OperationResults()
    assert not results.known("a")
    assert results.start("a")
    assert not results.start("a")  # running: a second drive starts nothing
    assert results.known("a") and results.result("a") is None and results.running() == 1
    results.finish("a", "done")
    assert results.result("a") == "done" and results.running() == 0
    assert not results.start("a")  # finished: never started again


def test_only_the_newest_finished_results_are_kept_and_running_ones_never_go() -> None:
    results: OperationResults[int] = OperationResults(keep_finished=3)
    assert results.start("long")
    for i in range(10):
        assert results.start(f"op{i}")
        results.finish(f"op{i}", i)
    assert len(results) == 4  # the three newest finished, and the one still running
    assert [results.known(f"op{i}") for i in range(10)] == [False] * 7 + [True] * 3
    assert results.known("long") and results.result("long") is None
    results.finish("long", 99)
    assert results.result("long") == 99 and not results.known("op7")


def test_the_bound_must_keep_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OperationResults(keep_finished=0)
