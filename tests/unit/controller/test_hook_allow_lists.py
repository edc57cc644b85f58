"""The controller never runs a command, image or URL no entry of the operator's allow-lists
names, even for a pool that admission let through: the pool says why (its Valid condition, a
Warning event on it), its repairs are held, and nothing of it is run or called."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.allow_lists import AllowLists
from autoclusters.controller.hook import HookRunner
from autoclusters.controller.statemachine import HOLD_NOT_ALLOW_LISTED
from autoclusters.pools.pool_config import PreDrainHook
from tests.unit.controller.harness import Harness


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.stop()


def _valid(h: Harness) -> dict[str, str]:
    obj = h.api.read(h.pool_path("p")) or {}
    return next(c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Valid")


def _pool_warnings(h: Harness) -> list[str]:
    return [e["message"] for e in h.events() if e["involvedObject"]["kind"] == "GpuNodePool" and e["type"] == "Warning"]


ACTED = ("Acting", "Verifying", "Succeeded")  # the provider has been driven
REAL_SECONDS = 60  # the marker command's own bound, real time (a loaded machine starts python slowly)


def _marker_command(tmp_path: Path) -> tuple[Path, list[str]]:
    ran = tmp_path / "ran"
    return ran, [sys.executable, "-c", f"open({str(ran)!r}, 'a').write('x')"]


def test_an_unlisted_provider_command_is_never_run_and_the_pool_says_why(h: Harness, tmp_path: Path) -> None:
    ran, argv = _marker_command(tmp_path)
    h.node("n1")
    h.pool(listed=False, provider={"type": "command", "command": {"command": argv, "timeoutSeconds": 5}})
    h.start()
    h.run(seconds=5)
    valid = _valid(h)
    assert valid["status"] == "False" and valid["reason"] == HOLD_NOT_ALLOW_LISTED
    assert "spec.provider.command.command" in valid["message"] and "allowLists.commands" in valid["message"]
    assert any("allowLists.commands" in m for m in _pool_warnings(h))
    h.fault("n1")
    h.run(seconds=120)
    record = h.records("n1")[0]
    assert record["status"].get("hold") == HOLD_NOT_ALLOW_LISTED, record["status"]
    assert not ran.exists()  # the program never ran


def test_the_same_command_runs_once_the_operator_lists_it(h: Harness, tmp_path: Path) -> None:
    """The contrast: an entry equal to the pool's argv lets the repair through.

    The command is a real process, started by the provider's own thread once the repair acts:
    the harness's fake clock says when the controller gets there, the real one how long the
    process may take (fake time runs far faster, so a bound in fake seconds failed under load)."""
    ran, argv = _marker_command(tmp_path)
    h.node("n1")
    h.pool(provider={"type": "command", "command": {"command": argv, "timeoutSeconds": REAL_SECONDS}})
    h.start()
    h.run(seconds=5)
    assert _valid(h)["status"] == "True"
    h.fault("n1")
    h.run(lambda: h.phase("n1") in ACTED, seconds=600)
    assert h.phase("n1") in ACTED, h.records("n1")
    deadline = time.monotonic() + REAL_SECONDS
    while not ran.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ran.exists()


def test_an_unlisted_hook_url_holds_the_pool_and_is_never_called(h: Harness) -> None:
    h.node("n1")
    h.pool(listed=False, preDrain={"waitSeconds": 0, "hook": {"url": "http://127.0.0.1:9/never"}})
    h.start()
    h.run(seconds=5)
    valid = _valid(h)
    assert valid["status"] == "False" and valid["reason"] == HOLD_NOT_ALLOW_LISTED
    assert "spec.preDrain.hook.url" in valid["message"] and "allowLists.urls" in valid["message"]
    h.fault("n1")
    h.run(seconds=60)
    assert h.records("n1")[0]["status"].get("hold") == HOLD_NOT_ALLOW_LISTED
    assert h.hook_threads.pending == []  # no hook was started


def test_the_hook_runner_refuses_an_unlisted_hook_itself(tmp_path: Path) -> None:
    """The second line: a hook that reaches the runner (a repair started before the list
    changed) is not called, and its report says which setting refused it."""
    ran, argv = _marker_command(tmp_path)
    requeued: list[str] = []
    runner = HookRunner(submit=lambda f: f(), requeue=requeued.append,
                        lists=AllowLists(commands={"other": ("/bin/true",)}))
    body = {"node": "n1", "pool": "p", "record": "n1-r", "action": "reset", "reason": "test",
            "fault": {"class": "gpu", "code": "79", "reason": "NvidiaXIDError", "message": "m"},
            "deadline": "2026-01-01T00:00:00Z"}
    assert runner.start(PreDrainHook(command=tuple(argv)), body)
    [result] = runner.take("n1")
    assert not result.ok and "allowLists.commands" in result.answer and "other" in result.answer
    assert requeued == ["n1"] and not ran.exists()
    listed = HookRunner(submit=lambda f: f(), lists=AllowLists(commands={"marker": tuple(argv)}))
    assert listed.start(PreDrainHook(command=tuple(argv)), body)
    assert listed.take("n1")[0].ok and ran.exists()
