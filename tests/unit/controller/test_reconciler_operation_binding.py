"""One operation, one provider: an operation is bound to the provider it was started with (its
spec, in the Remediation record's ``status.operation.provider``), and a change of the pool's
provider settings in mid-operation neither starts the operation a second time nor sends its
looks to another provider. The command provider's script is a real subprocess; the test
waits (bounded, in real time) only for what that script itself does."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoclusters.controller import remediation_record as rec
from tests.unit.controller.harness import Harness

JSON = dict[str, Any]


@pytest.fixture
def h() -> Any:
    harness = Harness()
    yield harness
    harness.stop()


def _script(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A reset script that notes each run (its operation id) and then waits for ``release``."""
    runs, release = tmp_path / f"{name}-runs", tmp_path / "release"
    script = tmp_path / f"{name}.py"
    script.write_text("import os, sys, time\n"
                      f"open({str(runs)!r}, 'a').write(os.environ['AUTOCLUSTERS_OPERATION_ID'] + '\\n')\n"
                      "end = time.monotonic() + 20\n"
                      f"while not os.path.exists({str(release)!r}) and time.monotonic() < end:\n"
                      "    time.sleep(0.01)\n")
    return script, runs, release


def _command(script: Path, timeout: int = 900) -> JSON:
    return {"type": "command", "command": {"command": [sys.executable, str(script)], "timeoutSeconds": timeout}}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _real_wait(what: Callable[[], bool], seconds: float = 20) -> None:
    end = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < end, "the script did not get there in time"
        time.sleep(0.01)


def _run_until(h: Harness, until: Callable[[], bool]) -> None:
    """Reconciles (a fake second at a time, far inside the operation's timeout) until ``until``,
    the command provider's thread running the real script meanwhile."""
    end = time.monotonic() + 20
    while not until():
        assert time.monotonic() < end, f"still {h.phase('n1')}"
        h.run(until, seconds=1)
        time.sleep(0.005)


def _operation(h: Harness) -> JSON:
    return dict(h.records("n1")[0]["status"]["operation"])


@pytest.mark.parametrize("change", ["timeout", "command"])
def test_a_change_of_the_pools_provider_settings_mid_operation_does_not_start_it_again(
        h: Harness, tmp_path: Path, change: str) -> None:
    script, runs, release = _script(tmp_path, "reset")
    other, other_runs, _ = _script(tmp_path, "other")
    h.node("n1")
    h.pool(provider=_command(script))
    h.start()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Acting")
    op = _operation(h)
    assert op["provider"] == _command(script)  # the record says what the operation started with
    _real_wait(lambda: len(_lines(runs)) == 1)  # the script is running
    # Mid-operation, the pool's provider settings change: a new spec, so a new provider.
    h.pool(provider=_command(script, timeout=901) if change == "timeout" else _command(other))
    h.run(seconds=10)  # looks of the operation while the script runs (polled every 2 s)
    assert h.phase("n1") == "Acting" and _operation(h) == op
    release.touch()
    _run_until(h, lambda: h.phase("n1") in ("Verifying", "Succeeded"))
    # The operation ended with the one run it started; the new settings started nothing.
    assert _lines(runs) == [op["id"]] and _lines(other_runs) == []
    assert _operation(h)["provider"] == _command(script)


def test_the_record_reads_back_the_provider_its_operation_was_started_with(h: Harness, tmp_path: Path) -> None:
    script, _, release = _script(tmp_path, "reset")
    release.touch()
    h.node("n1")
    h.pool(provider=_command(script))
    h.start()
    h.fault("n1")
    h.run(lambda: h.phase("n1") == "Acting")
    state = rec.state_of(h.records("n1")[0])
    assert state is not None and state.operation is not None
    # the same string the pool's spec is kept under: the first look finds the provider that started it
    assert json.loads(state.operation.provider) == _command(script)
    assert rec.status_of(state)["operation"] == _operation(h)


def test_an_escalation_binds_its_replacement_to_the_replace_provider_alone(h: Harness, tmp_path: Path) -> None:
    """The reset's operation (command) fails and the repair escalates: the replacement's
    operation is bound to the pool's replace provider, and the record holds that spec alone,
    not a mix of both under the status's merge patch."""
    script = tmp_path / "reset.py"
    script.write_text("import sys\nsys.exit(1)\n")
    reset = _command(script)
    h.node("n1")
    h.pool(provider={"reset": reset, "replace": {"type": "simulated"}})
    h.start()
    h.fault("n1")
    _run_until(h, lambda: any((r.get("status") or {}).get("operation", {}).get("action") == "replace"
                              for r in h.records("n1")))
    op = _operation(h)
    assert op["provider"] == {"type": "simulated", "simulated": {}}
    _run_until(h, lambda: h.phase("n1") in ("Verifying", "Succeeded"))  # the simulated provider replaced it
    assert _operation(h) == op
