"""The pool's pre-drain hook: one call when the warning goes out, ended before any eviction
and before the provider is asked.

The payload is one JSON object (node, pool, record, fault, reason, deadline), sent as the
body of an HTTP POST (``url``) or on the standard input of ``command`` (which also gets it
as ``AUTOCLUSTERS_*`` environment variables). Either way the call is bounded by the hook's
timeout (at most ``pool_fields.PRE_DRAIN_HOOK_TIMEOUT_SECONDS.maximum``, refused above it at
admission) and by ``api.OUTPUT_CAPTURE_BYTES`` of output kept (``autoclusters.capture``);
what a report says of the answer is redacted and cut (``autoclusters.redact``).

A hook never runs on a reconcile worker: ``HookRunner`` runs it on threads of its own; its
end puts the node back on the work queue, and that reconcile reports the result. Until then
the repair's plans leave out eviction and the provider's call (``statemachine._after_the_hook``),
so the hook still ends before either, at most its timeout after the warning. A hook that
fails is reported (a Warning event on the node), never retried, and the drain goes on. A hook
that needs time to prepare acknowledges like any other preparer (a node annotation, when the
pool lists it).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoclusters import allow_lists, api, capture
from autoclusters.clock import utc_iso
from autoclusters.controller.statemachine import RepairState
from autoclusters.deploy.providers import NO_PROVIDER
from autoclusters.pools import allow_listed
from autoclusters.pools.pool_config import PreDrainHook
from autoclusters.redact import redact

log = logging.getLogger(__name__)


class HookFailed(Exception):
    """The hook could not be called or answered with an error; the message (redacted) says which."""


def payload(state: RepairState, deadline: datetime, reason: str) -> dict[str, Any]:
    f = state.fault
    return {"node": state.node, "pool": state.pool, "record": state.name, "action": str(state.action),
            "fault": {"class": f.fault_class, "code": f.code, "reason": f.reason, "message": f.message},
            "reason": reason, "deadline": utc_iso(deadline)}


def _said(output: bytes, dropped: bool, *, body: bool = False) -> str:
    """What a report shows of a hook's output (its stderr's end; an HTTP answer's start):
    redacted, cut, and what the capture dropped said."""
    text = redact(output.decode(errors="replace").strip(), api.OUTPUT_REPORT_CHARS, keep_start=body)
    if dropped and text:
        text = f"[only the {'first' if body else 'last'} {api.OUTPUT_CAPTURE_BYTES} bytes kept] {text}"
    return text


def call(hook: PreDrainHook, body: dict[str, Any]) -> str:
    """Calls the hook; returns a short description of the answer, raises ``HookFailed``. Every
    URL and every piece of output in either is redacted."""
    data = json.dumps(body, sort_keys=True).encode()
    if hook.url:
        where = redact(hook.url)
        try:
            with urllib.request.urlopen(capture.json_post(hook.url, data), timeout=hook.timeout_seconds) as resp:
                capture.read_bounded(resp, api.OUTPUT_CAPTURE_BYTES)
                return f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            answer = _said(*capture.read_bounded(e, api.OUTPUT_CAPTURE_BYTES), body=True)
            raise HookFailed(f"POST {where} answered HTTP {e.code}" + (f": {answer}" if answer else "")) from None
        except (OSError, ValueError) as e:
            raise HookFailed(f"POST {where} failed: {redact(str(e))}") from None
    env = {**os.environ, "AUTOCLUSTERS_NODE": body["node"], "AUTOCLUSTERS_POOL": body["pool"],
           "AUTOCLUSTERS_REMEDIATION": body["record"], "AUTOCLUSTERS_DRAIN_DEADLINE": body["deadline"],
           "AUTOCLUSTERS_DRAIN_REASON": body["reason"], "AUTOCLUSTERS_FAULT": f"{body['fault']['class']}:"
                                                                                f"{body['fault']['code']}"}
    program = redact(hook.command[0])
    try:
        done = capture.run(hook.command, stdin=data, env=env, timeout=hook.timeout_seconds,
                           limit=api.OUTPUT_CAPTURE_BYTES)
    except OSError as e:
        raise HookFailed(f"{program} could not be run: {redact(str(e))}") from None
    if done.returncode is None:
        raise HookFailed(f"{program} did not finish within {hook.timeout_seconds}s")
    if done.returncode != 0:
        tail = _said(done.stderr, done.dropped)
        raise HookFailed(f"{program} exited {done.returncode}" + (f": {tail}" if tail else ""))
    return "exit 0"


@dataclass(frozen=True)
class HookResult:
    """How one hook call ended, for the node's next reconcile to report."""

    node: str
    record: str
    ok: bool
    answer: str  # redacted: the answer, or why it failed


Submit = Callable[[Callable[[], None]], object]


class HookRunner:
    """Runs pre-drain hooks on threads of their own (``submit``: an executor's; the tests' harness
    runs them when it chooses), never on the reconcile worker that asked. A record's hook runs
    once at a time; its end is kept for the node and the node is requeued (``requeue``), so the
    reconcile that picks it up (``take``) reports it."""

    def __init__(self, *, submit: Submit | None = None, requeue: Callable[[str], None] = lambda _node: None,
                 workers: int = api.HOOK_WORKERS, lists: allow_lists.AllowLists = allow_lists.NONE) -> None:
        self._allow_lists = lists  # a hook no entry allows is never called (the reconciler holds its pool)
        self._pool: ThreadPoolExecutor | None = None
        if submit is None:
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pre-drain-hook")
            submit = self._pool.submit
        self._submit = submit
        self._requeue = requeue
        self._lock = threading.Lock()
        self._running: set[str] = set()  # records whose hook is running
        self._ended: dict[str, list[HookResult]] = defaultdict(list)  # node -> results not reported yet

    def start(self, hook: PreDrainHook, body: dict[str, Any]) -> bool:
        """Starts the hook for the record of ``body``; False (nothing started) while one runs."""
        record = str(body["record"])
        with self._lock:
            if record in self._running:
                return False
            self._running.add(record)
        self._submit(lambda: self._run(hook, body))
        return True

    def _run(self, hook: PreDrainHook, body: dict[str, Any]) -> None:
        node, record = str(body["node"]), str(body["record"])
        refused = allow_listed.pool_refusals(self._allow_lists, provider=NO_PROVIDER, hook_url=hook.url,
                                             hook_command=hook.command)
        try:
            if refused:
                raise HookFailed(f"not called: {refused[0]}")
            result = HookResult(node, record, True, call(hook, body))
        except HookFailed as e:
            result = HookResult(node, record, False, str(e))
        except Exception as e:  # a bug of ours must not lose the report
            log.exception("pre-drain hook for %s (%s) crashed", node, record)
            result = HookResult(node, record, False, f"the controller could not call it ({type(e).__name__})")
        with self._lock:
            self._running.discard(record)
            self._ended[node].append(result)
        self._requeue(node)

    def running(self, record: str) -> bool:
        with self._lock:
            return record in self._running

    def take(self, node: str) -> list[HookResult]:
        """The results of the node's hooks that ended since the last take."""
        with self._lock:
            return self._ended.pop(node, [])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
