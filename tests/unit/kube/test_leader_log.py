"""A candidate's sign that it looked at a lease held by another and left it (``--verbose``): one
debug line per look, naming the holder and the renewTime it saw (issue 28 item 4)."""

from __future__ import annotations

import logging

import pytest

from autoclusters.clock import FakeClock
from autoclusters.kube.leader import LeaderElector
from tests.unit.fakeapi import FakeApi

NS = "autoclusters-system"
LOGGER = "autoclusters.kube.leader"


def test_a_candidate_logs_each_look_at_a_held_lease(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    api, clock = FakeApi(), FakeClock()
    a, b = (LeaderElector(api.kube(), clock, namespace=NS, name="ctl", identity=i) for i in ("a", "b"))
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(1)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER and "not taken" in r.getMessage()]
    assert len(lines) == 2 and all(line.startswith("lease ctl held by a (renewed ") for line in lines)
    assert lines[0] != lines[1]  # the renewal it saw in between
    assert not any("held by b" in r.getMessage() for r in caplog.records)


def test_the_holder_logs_no_look(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    api, clock = FakeApi(), FakeClock()
    a = LeaderElector(api.kube(), clock, namespace=NS, name="ctl", identity="a")
    assert a.try_acquire_or_renew() and a.try_acquire_or_renew()
    assert not [r for r in caplog.records if "not taken" in r.getMessage()]
