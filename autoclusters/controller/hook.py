"""The pool's pre-drain hook: one call when the warning goes out, before any eviction.

The payload is one JSON object (node, pool, record, fault, reason, deadline), sent as the
body of an HTTP POST (``url``) or on the standard input of ``command`` (which also gets it
as ``AUTOCLUSTERS_*`` environment variables). Either way the call is bounded by the hook's
timeout. A hook that fails is reported to the caller, never retried and never holds the
repair: the pre-drain deadline stands whatever the hook does. A hook that needs time to
prepare acknowledges like any other preparer (a node annotation, when the pool lists it).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

from autoclusters.clock import utc_iso
from autoclusters.controller.statemachine import RepairState
from autoclusters.deploy.pool_config import PreDrainHook


class HookFailed(Exception):
    """The hook could not be called or answered with an error; the message says which."""


def payload(state: RepairState, deadline: datetime, reason: str) -> dict[str, Any]:
    f = state.fault
    return {"node": state.node, "pool": state.pool, "record": state.name, "action": state.action.value,
            "fault": {"class": f.fault_class, "code": f.code, "reason": f.reason, "message": f.message},
            "reason": reason, "deadline": utc_iso(deadline)}


def call(hook: PreDrainHook, body: dict[str, Any]) -> str:
    """Calls the hook; returns a short description of the answer, raises ``HookFailed``."""
    data = json.dumps(body, sort_keys=True).encode()
    if hook.url:
        req = urllib.request.Request(hook.url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=hook.timeout_seconds) as resp:
                resp.read(65536)
                return f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            raise HookFailed(f"POST {hook.url} answered HTTP {e.code}") from None
        except (OSError, ValueError) as e:
            raise HookFailed(f"POST {hook.url} failed: {e}") from None
    env = {**os.environ, "AUTOCLUSTERS_NODE": body["node"], "AUTOCLUSTERS_POOL": body["pool"],
           "AUTOCLUSTERS_REMEDIATION": body["record"], "AUTOCLUSTERS_DRAIN_DEADLINE": body["deadline"],
           "AUTOCLUSTERS_DRAIN_REASON": body["reason"], "AUTOCLUSTERS_FAULT": f"{body['fault']['class']}:"
                                                                                f"{body['fault']['code']}"}
    try:
        done = subprocess.run(list(hook.command), input=data, env=env, capture_output=True,
                              timeout=hook.timeout_seconds, check=False)
    except subprocess.TimeoutExpired:
        raise HookFailed(f"{hook.command[0]} did not finish within {hook.timeout_seconds}s") from None
    except OSError as e:
        raise HookFailed(f"{hook.command[0]} could not be run: {e}") from None
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-300:]
        raise HookFailed(f"{hook.command[0]} exited {done.returncode}" + (f": {tail}" if tail else ""))
    return "exit 0"
