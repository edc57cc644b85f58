"""The work queue: per-key dedup, delayed adds, per-key backoff."""

from __future__ import annotations

import threading
import time

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


class CountingClock:
    """time.monotonic, counting the calls: a waiting worker that looks at the clock woke up."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.calls += 1
        return time.monotonic()


def _getter(q: WorkQueue, out: list[tuple[str | None, float]], timeout: float | None = None) -> threading.Thread:
    def run() -> None:
        key = q.get(timeout)
        out.append((key, time.monotonic()))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _blocked(t: threading.Thread) -> bool:
    t.join(0.1)
    return t.is_alive()


def test_a_waiting_worker_sleeps_until_woken_without_polling() -> None:
    clock = CountingClock()
    q = WorkQueue(monotonic=clock)
    out: list[tuple[str | None, float]] = []
    workers = [_getter(q, out) for _ in range(4)]
    time.sleep(0.2)
    calls = clock.calls
    time.sleep(1.2)  # the polling queue looked every 0.5 s
    assert clock.calls == calls, "an idle worker woke up with nothing added"
    added = time.monotonic()
    q.add("a")
    deadline = time.monotonic() + 2
    while not out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [k for k, _ in out] == ["a"] and out[0][1] - added < 2
    assert sum(_blocked(t) for t in workers) == 3  # one woken for one key
    q.close()
    for t in workers:
        t.join(2)
        assert not t.is_alive()
    assert [k for k, _ in out[1:]] == [None] * 3


def test_a_key_due_before_the_timer_wakes_is_handed_out_at_its_own_time() -> None:
    q = WorkQueue()
    out: list[tuple[str | None, float]] = []
    q.add("late", 5)
    workers = [_getter(q, out) for _ in range(3)]  # one of them waits for "late", the others until woken
    time.sleep(0.1)
    start = time.monotonic()
    q.add("soon", 0.2)  # due before the timer would wake: the queue re-arms for it
    deadline = time.monotonic() + 4
    while not out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [k for k, _ in out] == ["soon"] and 0.2 - 0.02 <= out[0][1] - start < 4
    q.close()
    for t in workers:
        t.join(2)
        assert not t.is_alive()
    assert "late" not in [k for k, _ in out]


def test_a_timer_that_times_out_hands_the_delayed_key_to_another_worker() -> None:
    q = WorkQueue()
    start = time.monotonic()
    q.add("k", 0.4)
    timer_out: list[tuple[str | None, float]] = []
    timer = _getter(q, timer_out, timeout=0.1)  # waits for "k" first, then gives up
    time.sleep(0.05)
    out: list[tuple[str | None, float]] = []
    other = _getter(q, out)  # a timer is there: this one sleeps until woken
    timer.join(2)
    assert timer_out[0][0] is None
    other.join(5)  # without a new timer nobody would ever wake for "k"
    assert out and out[0][0] == "k" and out[0][1] - start >= 0.4 - 0.02
    q.close()


def test_close_wakes_every_waiting_worker() -> None:
    q = WorkQueue()
    q.add("later", 60)
    out: list[tuple[str | None, float]] = []
    workers = [_getter(q, out) for _ in range(5)]
    assert all(_blocked(t) for t in workers)
    q.close()
    for t in workers:
        t.join(2)
        assert not t.is_alive()
    assert [k for k, _ in out] == [None] * 5
    q.add("after-close")
    assert q.get(0.05) is None
