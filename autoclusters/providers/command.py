"""The command provider: runs an operator's script to reset or replace a node.

The script gets the node's details as arguments (``ACTION NODE``) and in the environment
(``AUTOCLUSTERS_ACTION``, ``AUTOCLUSTERS_NODE``, ``AUTOCLUSTERS_POOL``,
``AUTOCLUSTERS_OPERATION_ID``). Exit code 0 = done, anything else (or the timeout) =
failed. A replacement script may print ``new-node=NAME`` to name the node that joined.

The script runs in a background thread, so a long reset never blocks the controller's
workers. A restarted controller runs it again for the same operation id: the script must
be idempotent for that id (the id is stable across restarts, so it can key its own state).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoclusters import api, capture
from autoclusters.api import RepairAction
from autoclusters.providers.base import BuildContext, NodeLookup, Provider, ProviderError
from autoclusters.providers.declaration import ProviderKind, Setting
from autoclusters.providers.operation_results import OperationResults
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from autoclusters.redact import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandResult:
    ok: bool
    message: str
    new_node: str = ""


def run_command(argv: Sequence[str], op: Operation, node: str, pool: str, timeout: float) -> CommandResult:
    """Runs the script with a bounded capture (``capture``); the message it reports (the
    record's, the events', the log's) is redacted and cut (``autoclusters.redact``)."""
    env = {**os.environ, "AUTOCLUSTERS_ACTION": str(op.action), "AUTOCLUSTERS_NODE": node,
           "AUTOCLUSTERS_POOL": pool, "AUTOCLUSTERS_OPERATION_ID": op.id}
    program = redact(argv[0])
    try:
        proc = capture.run([*argv, str(op.action), node], env=env, timeout=timeout, limit=api.OUTPUT_CAPTURE_BYTES)
    except OSError as e:
        return CommandResult(False, f"{program} could not run: {redact(str(e))}")
    if proc.returncode is None:
        return CommandResult(False, f"{program} did not finish within {timeout:g}s")
    stdout = proc.stdout.decode(errors="replace")
    new = ""
    for line in stdout.splitlines():
        if line.startswith("new-node="):
            new = line.split("=", 1)[1].strip()
    if proc.returncode != 0:
        tail = (proc.stderr.decode(errors="replace") or stdout).strip().splitlines()[-1:] or [""]
        return CommandResult(False, f"{program} exited {proc.returncode}: "
                                    f"{redact(tail[0], api.OUTPUT_REPORT_CHARS)}")
    return CommandResult(True, "", new)


class CommandProvider:
    name = "command"

    def __init__(self, argv: Sequence[str], *, timeout: float = 900) -> None:
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise ProviderError("provider.command.command must be a non-empty list of strings")
        if shutil.which(argv[0]) is None:
            raise ProviderError(f"provider.command.command[0] {argv[0]!r} is not an executable file in the "
                                "controller's container (mount the script and name its absolute path)")
        self._argv = list(argv)
        self._timeout = timeout
        self._results: OperationResults[CommandResult] = OperationResults()

    def replacement_name(self, op: Operation, pool: str) -> str:
        result = self._results.result(op.id)
        return result.new_node if result else ""

    def refusal(self, node: dict[str, Any] | None) -> str:
        return ""

    def drive(self, op: Operation, node: str, pool: str) -> None:
        if not self._results.start(op.id):
            return
        threading.Thread(target=self._run, args=(op, node, pool), name=f"command-{op.id}", daemon=True).start()

    def _run(self, op: Operation, node: str, pool: str) -> None:
        result = run_command(self._argv, op, node, pool, self._timeout)
        log.info("command provider %s %s: %s", op.action, node, "ok" if result.ok else result.message)
        self._results.finish(op.id, result)

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        if not self._results.known(op.id):
            return ProviderView(ProviderState.NOT_STARTED)
        result = self._results.result(op.id)
        if result is None:
            return ProviderView(ProviderState.RUNNING)
        if result.ok:
            return ProviderView(ProviderState.SUCCEEDED, new_node=result.new_node)
        return ProviderView(ProviderState.FAILED, result.message)


def _build(s: Mapping[str, Any], c: BuildContext) -> Provider:
    return CommandProvider(list(s["command"]), timeout=float(s["timeoutSeconds"]))


KIND = ProviderKind(
    "command", (RepairAction.RESET.value, RepairAction.REPLACE.value),
    "Runs an operator's script in the controller's container: ARGV + ACTION NODE; exit 0 = done.",
    (Setting("command", "strings", "The program and its first arguments; an entry of the allow-list "
             "allowLists.commands.", required=True, allow_list="commands"),
     Setting("timeoutSeconds", "integer", "The script fails after this long.", minimum=1, default=900)),
    build=_build)
