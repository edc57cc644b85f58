"""The work queue: per-key dedup, delayed adds, per-key backoff."""

from __future__ import annotations

from autoclusters.kube.workqueue import WorkQueue


def test_queue_dedups_and_backs_off_per_key() -> None:
    q = WorkQueue(base_delay=0.05, max_delay=1)
    q.add("a")
    q.add("a")
    q.add("b")
    assert {q.get(0.1), q.get(0.1)} == {"a", "b"} and q.get(0.05) is None
    q.add("a")  # while processing: handed out again after done()
    assert q.get(0.05) is None
    q.done("a")
    assert q.get(0.1) == "a"
    assert q.backoff("a") == 0.05 and q.backoff("a") == 0.1 and q.backoff("a") == 0.2
    q.done("a")
    q.done("b")
    q.add("b")
    assert q.get(0.1) == "b"  # b is not held back by a's failures
    q.forget("a")
    assert q.failures("a") == 0
