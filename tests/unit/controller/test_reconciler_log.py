"""The controller's sign that it looked at a node and decided (``--verbose``): one debug line per
node reconcile with the version it read and the open repair's phase after it. A check that
something did not happen waits for a line at or past the version that should have made it
happen (issue 28 item 4)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from tests.unit.controller.harness import Harness
from tests.unit.fakeapi import ApiError, Request

LOGGER = "autoclusters.controller.reconciler"
LINE = re.compile(r"node (\S+) reconciled \(read at resourceVersion (\S+)\): (.*)")


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def _lines(caplog: pytest.LogCaptureFixture, node: str) -> list[tuple[int, str]]:
    found = [LINE.fullmatch(r.getMessage()) for r in caplog.records if r.name == LOGGER]
    return [(int(m[2]), m[3]) for m in found if m and m[1] == node]


def _version(h: Harness, node: str) -> int:
    obj = h.node_obj(node)
    assert obj is not None
    return int(obj["metadata"]["resourceVersion"])


def test_a_held_repair_logs_the_version_it_read_and_its_phase(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    h.pool(mode="propose")
    h.node("n1")
    h.start()
    h.run()
    assert _lines(caplog, "n1") and all(what == "no open repair" for _, what in _lines(caplog, "n1"))
    h.fault("n1")
    h.run(seconds=30)
    assert h.phase("n1") == "AwaitingApproval"
    caplog.clear()
    h.kube.patch_node("n1", {"metadata": {"annotations": {"example.com/touched": "1"}}})
    touched = _version(h, "n1")
    h.run(seconds=5)
    after = [(version, what) for version, what in _lines(caplog, "n1") if version >= touched]
    assert after, _lines(caplog, "n1")
    assert all(what.endswith(" AwaitingApproval") and what.startswith("record ") for _, what in after)
    assert h.phase("n1") == "AwaitingApproval"


def test_no_line_unless_debug(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    h.pool(mode="auto")
    h.node("n1")
    h.start()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Succeeded")
    assert _lines(caplog, "n1") == []


def test_a_refused_write_logs_the_failed_look(caplog: pytest.LogCaptureFixture) -> None:
    """A reconcile whose write is refused raises (the workers log and retry it); its line says it
    was tried and failed, with the open repair's phase as stored."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    h = Harness(retry_errors=True)
    try:
        h.pool(mode="auto")
        h.node("n1")
        h.start()
        h.run()

        def refuse_node_patches(req: Request) -> None:
            if req.verb == "PATCH" and req.resource == "nodes":
                raise ApiError(403, "refused by the test", reason="Forbidden")

        h.api.before.append(refuse_node_patches)
        h.fault("n1")
        h.run(seconds=10)
        failed = [what for _, what in _lines(caplog, "n1") if what.startswith("failed (")]
        assert h.errors and failed, _lines(caplog, "n1")
        assert all(what.startswith("failed (Forbidden): record ") for what in failed)
    finally:
        h.stop()
