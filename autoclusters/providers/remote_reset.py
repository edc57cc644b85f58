"""What every provider that resets a node through a remote API shares (redfish's BMC, the EC2
API; GCE's ``instances.reset`` and others the same way: one module each, a subclass of
``RemoteReset``).

- ``drive`` starts one thread per operation, which runs the subclass's ``_reset`` (the
  requests; a slow API never holds the controller's workers). ``_reset`` returns what it did,
  in words, or raises ``ResetFailure`` naming the API and its answer.
- Before a request that resets, the subclass writes the operation id on the node (``_mark``,
  in its own annotation; ``ID`` or ``ID/STEP`` for a reset of several steps): a restarted
  controller that finds it does not ask again for what it marked (a reset it might have sent is
  never doubled; one it never sent fails at the timeout). The mark is removed once the
  operation has ended, succeeded or failed.
- Success, as for a host reboot: the node reports a new ``bootID`` and is Ready within
  ``timeout`` seconds of the operation's start. Failure: the subclass's ``ResetFailure``, a
  node that disappeared, or one that did not come back in time (``_late`` says where to look).
"""

from __future__ import annotations

import base64
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from autoclusters import api
from autoclusters.api import RepairAction
from autoclusters.clock import Clock
from autoclusters.kube import Kube, KubeError, NotFound
from autoclusters.kube.objects import node_ready
from autoclusters.names import Names
from autoclusters.providers.base import NodeCache, NodeLookup
from autoclusters.providers.hostreboot import boot_id
from autoclusters.providers.operation_results import OperationResults
from autoclusters.providers.types import Operation, ProviderState, ProviderView
from autoclusters.redact import redact

log = logging.getLogger(__name__)


class ResetFailure(Exception):
    """What went wrong at the remote API, in words for the record: the API, what was asked, its answer."""


@dataclass(frozen=True)
class ResetResult:
    ok: bool
    message: str = ""


def secret_text(secret: dict[str, Any], key: str, where: str) -> str:
    """A Secret's key as text ("" when absent); raises ValueError naming a key that is not base64 of UTF-8."""
    try:
        return base64.b64decode(((secret.get("data") or {}).get(key)) or "").decode()
    except ValueError:
        raise ValueError(f"{where}: key {key} is not base64 of UTF-8 text") from None


def read_secret(kube: Kube, namespace: str, name: str, holds: str) -> tuple[dict[str, Any], str]:
    """A provider's credentials Secret and its name in words (``Secret NS/NAME``); raises
    ResetFailure saying what it holds (``holds``) when it is missing or cannot be read."""
    where = f"Secret {namespace}/{name}"
    try:
        return kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}"), where
    except NotFound:
        raise ResetFailure(f"{where} does not exist: it holds {holds}") from None
    except KubeError as e:
        raise ResetFailure(f"{where} could not be read: {e}") from None


def marked(node: dict[str, Any] | None, annotation: str) -> str:
    """The mark a provider left on the node (``ID`` or ``ID/STEP``; "" when none)."""
    return str((((node or {}).get("metadata") or {}).get("annotations") or {}).get(annotation, ""))


def is_mark_of(value: str, op: Operation) -> bool:
    return value == op.id or value.startswith(op.id + "/")


class RemoteReset:
    """The base of a reset through a remote API (see the module's doc). A subclass sets
    ``name``, ``through`` (how it resets, for messages: "through its BMC") and implements
    ``_reset`` and ``_late``."""

    name = ""
    through = ""

    def __init__(self, kube: Kube, clock: Clock, names: Names, *, mark_annotation: str, timeout: float,
                 nodes: NodeCache | None) -> None:
        self._kube = kube
        self._clock = clock
        self._names = names
        self._mark_annotation = mark_annotation
        self.timeout = timeout
        self._nodes = nodes
        self._results: OperationResults[ResetResult] = OperationResults()  # running: the requests are under way

    # --- what a subclass provides ------------------------------------------------------------
    def _reset(self, op: Operation, node: str) -> str:
        """The requests (in the operation's thread): what was done, or ResetFailure."""
        raise NotImplementedError

    def _late(self, node: str, current: dict[str, Any], done: bool) -> str:
        """The failure when the node did not come back in time (``done``: the requests ended)."""
        raise NotImplementedError

    # --- the provider interface ------------------------------------------------------------
    def replacement_name(self, op: Operation, pool: str) -> str:
        return ""

    def drive(self, op: Operation, node: str, pool: str) -> None:
        if op.action != RepairAction.RESET:
            return  # progress says why
        if not self._results.start(op.id):
            return
        threading.Thread(target=self._run, args=(op, node), name=f"{self.name}-{op.id}", daemon=True).start()

    def progress(self, op: Operation, node: str, pool: str, lookup: NodeLookup) -> ProviderView:
        if op.action != RepairAction.RESET:
            return ProviderView(ProviderState.FAILED, f"the {self.name} provider resets nodes only; name another "
                                                      "provider for replace")
        current = lookup(node)
        if current is None:
            return ProviderView(ProviderState.FAILED, f"node {node} disappeared during its reset {self.through}")
        if boot_id(current) not in ("", op.boot_id_before) and node_ready(current):
            self._unmark(current, op)
            return ProviderView(ProviderState.SUCCEEDED)
        if not self._results.known(op.id):
            return ProviderView(ProviderState.NOT_STARTED)
        result = self._results.result(op.id)
        if result is not None and not result.ok:
            self._unmark(current, op)
            return ProviderView(ProviderState.FAILED, result.message)
        now = self._clock.now()
        deadline = op.started + timedelta(seconds=self.timeout)
        if now >= deadline:
            self._unmark(current, op)
            return ProviderView(ProviderState.FAILED, self._late(node, current, result is not None))
        return ProviderView(ProviderState.RUNNING, next_check=min(2.0, (deadline - now).total_seconds()))

    # --- the requests, in the operation's thread -------------------------------------------
    def _run(self, op: Operation, node: str) -> None:
        try:
            result = ResetResult(True, self._reset(op, node))
        except ResetFailure as e:
            result = ResetResult(False, redact(str(e), api.OUTPUT_REPORT_CHARS * 2, keep_start=True))
        except Exception as e:  # a bug here must fail this reset, not hang it
            log.exception("%s reset of %s", self.name, node)
            result = ResetResult(False, f"the {self.name} reset of node {node} failed: {redact(repr(e))}")
        log.info("%s reset %s: %s", self.name, node, "ok" if result.ok else result.message)
        self._results.finish(op.id, result)

    def _mark(self, node: str, value: str) -> None:
        """``value`` (the operation id, or ``ID/STEP``) on the node, before the request it guards."""
        body = {"metadata": {"annotations": {self._mark_annotation: value}}}
        try:
            written = self._kube.patch_node(node, body)
        except KubeError as e:
            raise ResetFailure(f"node {node} could not be marked before its reset: {e}") from None
        if self._nodes is not None:
            self._nodes.written(written)

    def _unmark(self, node: dict[str, Any], op: Operation) -> None:
        """The operation's mark off the node once the operation has ended (it only guarded the
        reset while it could still be asked for); a failed write leaves a stale mark, which no
        other operation matches."""
        if not is_mark_of(marked(node, self._mark_annotation), op):
            return
        name = str((node.get("metadata") or {}).get("name", ""))
        try:
            written = self._kube.patch_node(name, {"metadata": {"annotations": {self._mark_annotation: None}}})
        except KubeError as e:
            log.warning("%s: could not remove %s from node %s: %s", self.name, self._mark_annotation, name, e)
            return
        if self._nodes is not None:
            self._nodes.written(written)
