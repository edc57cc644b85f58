"""The command provider: an operator's script, its exit code, timeout and idempotence."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import pytest

from autoclusters.api import RepairAction
from autoclusters.providers.command import CommandProvider
from autoclusters.providers.types import Operation, ProviderState

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _wait(provider: CommandProvider, op: Operation) -> ProviderState:
    for _ in range(100):
        view = provider.progress(op, "n1", "a", lambda _n: None)
        if view.state not in (ProviderState.RUNNING, ProviderState.NOT_STARTED):
            return view.state
        time.sleep(0.05)
    raise AssertionError("command did not finish")


def test_command_provider_exit_code_and_idempotence(tmp_path) -> None:
    marker = tmp_path / "runs"
    script = tmp_path / "repair.py"
    script.write_text("import os, sys\n"
                      f"open({str(marker)!r}, 'a').write(os.environ['AUTOCLUSTERS_OPERATION_ID'] + '\\n')\n"
                      "print('new-node=n9')\n"
                      "sys.exit(0 if sys.argv[1] == 'replace' else 3)\n")
    provider = CommandProvider([sys.executable, str(script)], timeout=10)
    ok = Operation("op-1", RepairAction.REPLACE, T)
    provider.drive(ok, "n1", "a")
    provider.drive(ok, "n1", "a")  # a retried drive does not run it twice
    assert _wait(provider, ok) == ProviderState.SUCCEEDED
    assert provider.progress(ok, "n1", "a", lambda _n: None).new_node == "n9"
    bad = Operation("op-2", RepairAction.RESET, T)
    provider.drive(bad, "n1", "a")
    assert _wait(provider, bad) == ProviderState.FAILED
    assert "exited 3" in provider.progress(bad, "n1", "a", lambda _n: None).message
    assert marker.read_text().split() == ["op-1", "op-2"]


def test_command_provider_timeout(tmp_path) -> None:
    provider = CommandProvider([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.3)
    op = Operation("op-3", RepairAction.RESET, T)
    provider.drive(op, "n1", "a")
    assert _wait(provider, op) == ProviderState.FAILED


def test_command_provider_rejects_empty_command() -> None:
    from autoclusters.providers.base import ProviderError

    with pytest.raises(ProviderError):
        CommandProvider([])
